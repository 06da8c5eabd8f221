"""Not the assay package: the repository's top folder (the package is ``assay/`` inside it).

A clone in a folder named ``assay`` imported from its parent folder would otherwise be an empty
namespace package ("module 'assay' has no attribute 'rows'"): imported under that name, this file
loads the real package from ``assay/`` and says where it came from (a warning; pytest, which
imports a test tree's top folder itself, gets the package without it).
"""

import os as _os
import sys as _sys

if __name__ == "assay":
    _here = _os.path.dirname(_os.path.abspath(__file__))
    __path__ = [_os.path.join(_here, "assay")]
    __file__ = _os.path.join(_here, "assay", "__init__.py")
    if "_pytest" not in _sys.modules:
        import warnings as _warnings

        _warnings.warn(
            f"'import assay' found the clone's folder {_here}, not the package inside it, because "
            f"Python runs in its parent folder; the package was loaded from {__path__[0]}; cd "
            f"into {_here} (or `pip install -e {_here}` and run elsewhere) to import it directly",
            stacklevel=2)
    with open(__file__, encoding="utf-8") as _f:
        exec(compile(_f.read(), __file__, "exec"))

"""The ``function`` verifier kind: your own grading function, named in a spec by reference.

``verifier: {kind: function, function: "mypkg.graders:grade", params: {...}, version: ...}``.

The function is called by its parameter names (:mod:`assay.binding`): it may take any of
``prompt``, ``completion``, ``reference``, ``row`` (the whole row) and ``meta`` (the record
fields kept in the row), in any order, plus its ``params`` as keywords; ``**kwargs`` gets them
all. A parameter of another name is an error at ``assay validate``. It returns what any judge may
(a number in [0, 1], ``(score, reason)``, ``{"reward", "reason", "meta", "markers"}``, or None
for "cannot judge"); NaN, a number outside [0, 1] and an exception never pass: the row stays
unjudged with the reason (the exception's type and message) recorded.

It runs in the grading worker pool: the verifier pickles as its reference (module, name,
params, the spec's folder) and each worker imports the function itself. Cached grades are keyed
on the checksum of the function's module source and of the helper modules it imports from the
spec's folder (``from grade_helpers import SLACK``), or on ``version`` when one is declared; a
module edited since it was imported is re-imported before grading, in every process.

Example:
    >>> import pathlib, sys, tempfile
    >>> d = tempfile.mkdtemp()
    >>> _ = pathlib.Path(d, "my_graders.py").write_text(
    ...     "def close(completion, reference, tol=0.0):\\n"
    ...     "    return abs(float(completion) - float(reference)) <= tol\\n")
    >>> v = FunctionVerifier("my_graders:close", {"tol": 0.5}, base_dir=d)
    >>> v.check("3.2", "3", {}).reward, v.check("4", "3", {}).reward
    (1.0, 0.0)
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from assay.binding import Binding
from assay.errors import SpecError
from assay.hashing import code_identity, file_checksum, user_code_files
from assay.judging import Verdict, Verifier, normalize_verdict
from assay.registry import load_callable
from assay.verify.registry import VERIFIERS

if TYPE_CHECKING:
    from assay.verify.spec import VerifierSpec

#: module name -> checksums of the sources (its file, its helpers') this process last imported.
_IMPORTED: dict[str, dict[str, str]] = {}


def _stamp(mod_name: str, base_dir: str | None) -> dict[str, str]:
    return {str(p): file_checksum(p) for p in user_code_files(mod_name, base_dir)}


def _reload_helpers(files: list[str], entry: str) -> None:
    """Re-import the loaded helper modules among ``files`` (deepest first), so the entry
    module's re-import binds their new values (``from grade_helpers import SLACK``)."""
    by_file = {str(Path(f).resolve()): m for m in list(sys.modules.values())
               if isinstance(f := getattr(m, "__file__", None), str)}
    for path in reversed(files):
        mod = by_file.get(path)
        if mod is not None and mod.__name__ != entry:
            importlib.reload(mod)


def load_fresh(ref: str, base_dir: str | None = None) -> Callable[..., object]:
    """``load_callable(ref)``, re-importing its module (and the helper modules it imports from
    its folder or the spec's) when one of their source files changed since this process
    imported them (or when it was imported before this module could note its sources)."""
    mod_name = ref.partition(":")[0]
    known = mod_name in sys.modules
    fn = load_callable(ref, what="verifier function", base_dir=base_dir)
    now = _stamp(mod_name, base_dir)
    if not now:
        return fn
    if _IMPORTED.get(mod_name) != now and (known or mod_name in _IMPORTED):
        try:
            _reload_helpers(list(now)[1:], mod_name)
            importlib.reload(sys.modules[mod_name])
        except Exception as e:
            raise SpecError(f"verifier function {ref!r}: re-importing the edited module failed "
                            f"({type(e).__name__}: {e})") from None
        fn = load_callable(ref, what="verifier function", base_dir=base_dir)
        now = _stamp(mod_name, base_dir)  # the re-import may import other helpers
    _IMPORTED[mod_name] = now
    return fn


#: What a grader may take, by name (see :mod:`assay.binding`).
NAMES = ("prompt", "completion", "reference", "row", "meta")


def _function_of(vspec: VerifierSpec) -> str:
    if vspec.function is None:  # the entry's validator requires it for this kind
        raise SpecError(f"verifier kind {vspec.kind} needs function: 'package.module:callable'")
    return vspec.function


def _binding(fn: Callable[..., object], params: Mapping[str, object], ref: str) -> Binding:
    return Binding(fn, NAMES, params=params, what=f"verifier function {ref!r}")


@VERIFIERS.register(
    "function", help="your own grading function: function: 'package.module:callable'"
)
class FunctionVerifier(Verifier):
    """Your own grading function (``function: 'mypkg.graders:grade'``) as a verifier."""

    needs_reference = False  # the function decides what a missing reference means
    parallel = True  # in worker processes: a hard per-row time limit, and no GIL contention
    takes_function = True
    open_markers = True  # the user's function may return any markers

    @classmethod
    def label_for(cls, vspec: VerifierSpec) -> str:
        """The function (and its declared version) names the verifier in the report."""
        return f"function {vspec.function}" + (
            f" (version {vspec.version})" if vspec.version else "")

    def __init__(self, function: str, params: Mapping[str, object] | None = None, *,
                 version: str | None = None, base_dir: str | None = None) -> None:
        self.function = function
        self.params = dict(params or {})
        self.version = version
        self.base_dir = base_dir
        self.name = function
        self._fn: Callable[..., object] | None = load_fresh(function, base_dir)
        self._bind = _binding(self._fn, self.params, function)

    @classmethod
    def from_spec(cls, vspec: VerifierSpec, base_dir: str | None = None) -> FunctionVerifier:
        """Built from a spec's ``verifier:`` entry (``params`` go to the function)."""
        return cls(_function_of(vspec), vspec.params, version=vspec.version, base_dir=base_dir)

    @classmethod
    def spec_fingerprint(cls, vspec: VerifierSpec, base_dir: str | None = None
                         ) -> dict[str, object]:
        """What keys cached grades: the reference, params, and ``version`` if declared, else
        :func:`assay.hashing.code_identity` (the function's module source and the helper
        modules it imports from its folder or the spec's: editing either recomputes)."""
        out = {"function": vspec.function, "params": vspec.params}
        fn = None if vspec.version is not None else load_fresh(_function_of(vspec), base_dir)
        return {**out, **code_identity(fn, version=vspec.version, base_dir=base_dir,
                                       what=f"verifier function {vspec.function!r}")}

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_fn"] = state["_bind"] = None  # workers import the function by reference
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)

    def check(self, candidate: str, reference: object, row: Mapping[str, object]) -> Verdict:
        """The function's judgement as a :class:`Verdict` (an exception propagates: grading
        records it as the row's ``error`` reason)."""
        if self._fn is None:
            self._fn = load_fresh(self.function, self.base_dir)
            self._bind = _binding(self._fn, self.params, self.function)
        meta = row.get("meta")
        return normalize_verdict(self._bind.call({
            "prompt": row.get("prompt"), "completion": candidate, "reference": reference,
            "row": row, "meta": meta if meta is not None else {}}))

    def __repr__(self) -> str:
        return f"FunctionVerifier({self.function!r}, {self.params!r})"

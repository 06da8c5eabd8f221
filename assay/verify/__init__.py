"""Verifiers: score a candidate answer against a reference, for ``assay.rows`` and ``assay.grade``.

Math (MathEqual, Numeric), text (ExactMatch, MultipleChoice), code (CodeExec), combinators, and
your own grading function (FunctionVerifier, ``kind: function``). Every verifier's ``check()``
returns a :class:`Verdict` ``(reward, reason, meta)``.

Example:
    >>> from assay.verify import ExactMatch, Verdict
    >>> v = ExactMatch().check("Paris.", "paris", {})
    >>> isinstance(v, Verdict), v.reward, v.reason
    (True, 1.0, 'exact match')
"""

from assay.judging import Verdict
from assay.verify.choice import MultipleChoice, extract_choice
from assay.verify.code import CodeExec, extract_code
from assay.verify.combine import All, Any, Weighted
from assay.verify.function import FunctionVerifier
from assay.verify.numeric import Numeric, extract_number
from assay.verify.symbolic import MathEqual
from assay.verify.text import ExactMatch, normalize

__all__ = [
    "All", "Any", "CodeExec", "ExactMatch", "FunctionVerifier", "MathEqual", "MultipleChoice", "Numeric",
    "Verdict", "Weighted",
    "extract_choice", "extract_code", "extract_number", "normalize",
]

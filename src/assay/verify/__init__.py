"""Verifiers: score a candidate answer against a reference, for ``assay.rows`` and ``assay.grade``.

Math (MathEqual, Numeric), text (ExactMatch, MultipleChoice), code (CodeExec), a model judge
(JudgeVerifier, judge_trust), combinators, and your own grading function (FunctionVerifier,
``kind: function``). Every verifier's ``check()`` returns a :class:`Verdict` ``(reward, reason,
meta)``; your own subclasses :class:`Verifier`; a spec's ``verifier:`` entry is a
:class:`VerifierSpec`.

Example:
    >>> from assay.verify import ExactMatch, Verdict
    >>> v = ExactMatch().check("Paris.", "paris", {})
    >>> isinstance(v, Verdict), v.reward, v.reason
    (True, 1.0, 'exact match')
"""

from assay.judging import Verdict, Verifier
from assay.verify.choice import MultipleChoice, extract_choice
from assay.verify.code import CodeExec, extract_code
from assay.verify.combine import All, Any, Weighted
from assay.verify.function import FunctionVerifier
from assay.verify.judge import JudgeVerifier, parse_grade
from assay.verify.lm_eval_metric import LmEvalMetric
from assay.verify.numeric import Numeric, extract_number
from assay.verify.spec import VerifierSpec
from assay.verify.symbolic import MathEqual
from assay.verify.text import ExactMatch, normalize
from assay.verify.trust import JudgeTrust, cohen_kappa, judge_trust

__all__ = [
    "All", "Any", "CodeExec", "ExactMatch", "FunctionVerifier", "JudgeTrust", "JudgeVerifier",
    "LmEvalMetric",
    "MathEqual", "MultipleChoice", "Numeric", "Verdict", "Verifier", "VerifierSpec", "Weighted",
    "cohen_kappa", "extract_choice",
    "extract_code", "extract_number", "judge_trust", "normalize", "parse_grade",
]

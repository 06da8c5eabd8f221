"""assay.data: the preference data plane (typed immutable items, lineage, DataView, checksums).

Also the built-in diagnostic set (``load_diagnostic_v3``) and dataset cards with pinned checksums.

Example:
    >>> from assay.data import DataView, make_pair
    >>> v = DataView([make_pair("Q", "a", "b", "x", seed_id="s", builder_id="h")])
    >>> v.effective_n(), v.checksum()[:3]
    (1.0, 'ds:')
"""

from assay.data.items import (
    EdgeObs,
    Pair,
    Prompt,
    Quadruple,
    Response,
    Span,
    Tournament,
    Trajectory,
    TrajStep,
    content_of,
    item_from_dict,
    make_pair,
    make_pairs,
    seed_id_of,
)
from assay.data.lineage import EFFECTIVE_N_KINDS, Lineage, effective_n, kish_ess
from assay.data.view import DataView, EffectiveN, apply_derivation, validate_steps

__all__ = [
    "DataView", "EFFECTIVE_N_KINDS", "EdgeObs", "EffectiveN", "Lineage", "Pair", "Prompt",
    "Quadruple", "Response", "Span", "Tournament", "TrajStep", "Trajectory", "apply_derivation",
    "content_of", "effective_n", "item_from_dict", "kish_ess", "make_pair", "make_pairs", "seed_id_of",
    "validate_steps",
]

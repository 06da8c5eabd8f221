"""assay.data: the preference data plane (typed immutable items, lineage, DataView, checksums).

Also alignment (``align``), HodgeRank, the 2x2 interaction, dataset cards, and the built-in
diagnostic set (``load_diagnostic_v3``) with its length-only baseline.

Example:
    >>> from assay.data import DataView, make_pair
    >>> v = DataView([make_pair("Q", "a", "b", "x", seed_id="s", builder_id="h")])
    >>> v.effective_n(), v.checksum()[:3]
    (1.0, 'ds:')
"""

from assay.data.align import SpanMap, TokenizedInput, align, tokenize
from assay.data.builtin.diagnostic import (
    DIAGNOSTIC_V3_CARD,
    DIMENSIONS,
    LengthBaseline,
    length_baseline,
    load_diagnostic_v3,
    load_diagnostic_v3_matched,
    load_diagnostic_v3_quadruples,
    read_diagnostic_dir,
)
from assay.data.cards import DatasetCard, data_checksum, load_dataset
from assay.data.hodge import HodgeRanking, hodge_rank
from assay.data.interaction import Interaction, quadruple_interaction
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
    "DIAGNOSTIC_V3_CARD", "DIMENSIONS", "DataView", "DatasetCard", "EFFECTIVE_N_KINDS",
    "EdgeObs", "EffectiveN", "HodgeRanking", "Interaction", "LengthBaseline",
    "Lineage", "Pair", "Prompt", "Quadruple", "Response", "Span", "SpanMap", "TokenizedInput",
    "Tournament", "TrajStep", "Trajectory", "align", "apply_derivation", "content_of",
    "data_checksum", "effective_n", "hodge_rank", "item_from_dict", "kish_ess", "length_baseline",
    "load_dataset", "load_diagnostic_v3", "load_diagnostic_v3_matched",
    "load_diagnostic_v3_quadruples", "make_pair", "make_pairs", "quadruple_interaction",
    "read_diagnostic_dir", "seed_id_of", "tokenize", "validate_steps",
]

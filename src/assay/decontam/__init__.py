"""The decontaminate stage: which eval items occur in a training corpus, and the train-side filter.

``contamination`` reports from the eval side, ``decontaminate`` filters training rows, and
``ContaminationIndex`` is the reusable corpus index kept in the content store.

Example:
    >>> from assay.decontam import decontaminate
    >>> kept, report = decontaminate([{"prompt": "Cancel order 9911."}, {"prompt": "Hi"}],
    ...                              against=[{"prompt": "cancel ORDER 9911"}])
    >>> [r["prompt"] for r in kept], report.n_dropped
    (['Hi'], 1)
"""

from assay.decontam.evalside import contamination
from assay.decontam.filtering import decontaminate
from assay.decontam.index import BuildStats, ContaminationIndex
from assay.decontam.normalize import normalize_text, tokens
from assay.decontam.results import (
    CleanSplit,
    Contamination,
    Decontamination,
    ItemMatch,
)
from assay.intervals import wilson_interval

__all__ = [
    "BuildStats", "CleanSplit", "ContaminationIndex", "Contamination", "Decontamination",
    "ItemMatch",
    "contamination", "decontaminate", "normalize_text", "tokens", "wilson_interval",
]

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
from assay.decontam.report import (
    CleanSplit,
    Contamination,
    Decontamination,
    ItemMatch,
)
from assay.intervals import wilson_interval
from assay.results import deprecated_names

__all__ = [
    "BuildStats", "CleanSplit", "ContaminationIndex", "Contamination", "Decontamination", "ItemMatch",
    "contamination", "decontaminate", "normalize_text", "tokens", "wilson_interval",
]

# Pre-0.2 names of the result classes (see assay.results: no suffix).
__getattr__ = deprecated_names(__name__, globals(), {"ContaminationReport": "Contamination", "FilterReport": "Decontamination"})

"""Source kinds: where a study's rows come from (built-in HumanEval, your files, datasets, plugins).

Each kind is a spec model registered in ``SOURCES``; it builds ungraded (or given-score) rows.
"""

from assay.sources import file as file
from assay.sources import hf_dataset as hf_dataset
from assay.sources import humaneval as humaneval
from assay.sources import lm_eval as lm_eval
from assay.sources.base import SourceSpec
from assay.sources.records import FieldMap, read_records, rows_from_records
from assay.sources.registry import SOURCES

__all__ = ["SOURCES", "FieldMap", "SourceSpec", "read_records", "rows_from_records"]

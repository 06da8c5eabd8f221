"""The types the stage modules pass across their seams: what a stage's ``compute`` returns, how a
graph node reads its inputs, and the stage positional arguments built from them.

Example:
    >>> from assay.stages.cache import cached_stage
    >>> import tempfile
    >>> from assay.store import Store
    >>> def compute() -> Computed:
    ...     return {"doc": {"answer": 42}}, {"rows": 0}
    >>> cached_stage(Store(tempfile.mkdtemp()), "measure", inputs=[], params={},
    ...              compute=compute).summary
    {'rows': 0}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

from assay.stages.cache import StageResult

#: What a stage's ``compute`` returns to :func:`assay.stages.cache.cached_stage`: its outputs
#: by name (a :class:`~assay.rows.Rows`, a ``pa.Table``, bytes or a JSON document: the cache
#: stores each by what it is, so ``object`` is the honest type) and its summary (a JSON document).
Computed: TypeAlias = tuple[dict[str, object], dict[str, Any]]

#: What a study graph's node reads of what ran: a node's result, or a group's results
#: (``group:<name>``), by id. Study nodes run stage functions only, so results are pointers.
Get: TypeAlias = Callable[[str], "StageResult | tuple[StageResult, ...]"]

#: A stage function's call, built when its node starts: positional arguments (the run context,
#: then its inputs: a result, a group's results, a shard...) and keyword arguments. The builder
#: never reads them, the stage function's signature checks them, hence ``object``.
NodeCall: TypeAlias = tuple[tuple[object, ...], dict[str, object]]

#: How a node builds its call from what ran (:class:`assay.stages.graph.Node`'s ``args``).
Args: TypeAlias = Callable[[Get], NodeCall]

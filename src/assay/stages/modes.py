"""The mode table's stage side: each mode's per-shard stage functions, found by name in the
declared stages (the table itself, :mod:`assay.modes`, is core: the spec reads it; re-exported).

Example:
    >>> MODES["generate"].stages, MODES["scores"].stages, MODES["choices"].model
    (('generate', 'grade'), (), 'scorer')
    >>> sorted(LOGLIK_STAGES), MODE_STAGES["verify"]
    (['choices', 'perplexity'], ('grade',))
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from assay.modes import (  # noqa: F401  (the table; re-exported: its home was here)
    MODES,
    ModelSlot,
    ModeRow,
    declare_mode,
    default_sources,
    needs_model,
    row_of,
)
from assay.stages.cache import StageResult
from assay.stages.declare import STAGES


class _StageFns(Mapping[str, Callable[..., StageResult]]):
    """mode -> its scoring stage's function, for the modes whose model is a ``scorer``; read
    from :data:`STAGES` when asked, so this module need not import the stage modules to have
    them registered (``assay.stages`` imports every one)."""

    def _modes(self) -> list[str]:
        return [m for m, r in MODES.items() if r.model == "scorer"]

    def __getitem__(self, mode: str) -> Callable[..., StageResult]:
        if mode not in self._modes():
            raise KeyError(mode)
        return STAGES[MODES[mode].stages[0]].fn

    def __iter__(self) -> Iterator[str]:
        return iter(self._modes())

    def __len__(self) -> int:
        return len(self._modes())


class _Stages(Mapping[str, tuple[str, ...]]):
    """mode -> its stage names (:attr:`ModeRow.stages`), a view of :data:`MODES`."""

    def __getitem__(self, mode: str) -> tuple[str, ...]:
        return MODES[mode].stages

    def __iter__(self) -> Iterator[str]:
        return iter(MODES)

    def __len__(self) -> int:
        return len(MODES)


#: mode -> the names of its per-shard stages (a view of :data:`MODES`).
MODE_STAGES: Mapping[str, tuple[str, ...]] = _Stages()

#: Modes whose rows a model scores by log-likelihood, shard by shard, in place of generate and
#: grade: the mode's scoring stage function (a view of :data:`MODES`).
LOGLIK_STAGES: Mapping[str, Callable[..., StageResult]] = _StageFns()


__all__ = ["LOGLIK_STAGES", "MODES", "MODE_STAGES", "ModeRow", "ModelSlot", "declare_mode",
           "default_sources", "needs_model", "row_of"]

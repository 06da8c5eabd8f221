"""Live progress in the Prefect UI: one progress artifact per long unit of work, updated.

Reads the same registry as the terminal printer (:mod:`assay.progress`); the description is
its line: done/total, rate, retries, errors, ETA.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

from assay import progress
from assay.progress import UnitState
from assay.progressbar import format_state


def _key(s: UnitState) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", f"progress-{s.stage}-{s.label}".lower()).strip("-")


def _pct(s: UnitState) -> float:
    if s.total:
        return round(min(100.0, 100.0 * s.done / s.total), 2)
    return 100.0 if s.finished else 0.0


class Publisher(progress.Watcher):
    """Creates a progress artifact for each unit open at least ``every_s`` and updates it on
    every :meth:`tick` (its thread ticks every ``every_s``) and when the unit ends. Runs in the
    flow run's context, so the artifacts belong to the flow run. Errors talking to the server
    are dropped: progress must never fail the work."""

    join_s = 10.0

    def __init__(self, every_s: float = 5.0) -> None:
        super().__init__(every_s)
        self.every_s = every_s
        self.ids: dict[tuple[str, str, float], Any] = {}
        self._ended: list[UnitState] = []
        self._lock = threading.Lock()
        self._ctx = contextvars.copy_context()

    def call(self, fn: Any) -> None:
        self._ctx.run(fn)

    def on_state(self, s: UnitState) -> None:
        if s.finished:
            with self._lock:
                self._ended.append(s)

    def tick(self, now: float | None = None) -> None:
        """Publish once (call from the flow's thread, or this object's thread)."""
        from prefect.artifacts import create_progress_artifact, update_progress_artifact

        now = time.monotonic() if now is None else now
        with self._lock:
            ended, self._ended = self._ended, []
        for s in [*progress.snapshot(), *ended]:
            ident = (s.stage, s.label, s.started)
            try:
                if ident in self.ids:
                    update_progress_artifact(self.ids[ident], _pct(s), format_state(s, now))
                elif now - s.started >= self.every_s and not s.finished:
                    self.ids[ident] = create_progress_artifact(
                        _pct(s), key=_key(s), description=format_state(s, now))
            except Exception:  # noqa: BLE001 - the server is away: the work goes on
                pass
            if s.finished:
                self.ids.pop(ident, None)

    def start(self) -> Publisher:
        super().start()
        return self

    def stop(self) -> None:
        super().stop()
        self._ctx.run(self.tick)  # the last counts of units that ended meanwhile


@contextlib.contextmanager
def progress_artifacts(every_s: float = 5.0) -> Iterator[Publisher]:
    """Publish progress artifacts while the block runs (call inside a flow run)."""
    pub = Publisher(every_s).start()
    try:
        yield pub
    finally:
        pub.stop()

"""ScoringWorker: reward models loaded and run in a spawned process of their own.

A CPU reward model next to server generation (the graph's preload) loads in seconds of Python
import (torch's) and runs Python between its kernels, all holding the GIL of the process whose
threads send the generation requests: measured on the pipeline benchmark, the server's slots ran
5-6.5 of 8 full while the model loaded in-process, against 7.5-7.7 after. In a worker the load
and the forward passes hold another interpreter's lock; only the texts and the float64 scores
cross (pickled), so the scores are the same bytes (tested against in-process scoring).

The worker is a fresh ``python -c`` running :func:`main` on one end of a socket pair, not a
multiprocessing spawn: a spawned child re-imports the parent's ``__main__``, which re-runs a
user's script that lacks the ``if __name__ == "__main__"`` guard (the study, its side effects).

Example:
    >>> from assay.reward.kinds import EmbeddingModel
    >>> entry = EmbeddingModel(name="minilm", kind="embedding", params={"device": "cpu"})
    >>> with ScoringWorker() as w:
    ...     rm = w.load(entry, None)         # the bundled MiniLM, loaded in the worker
    ...     s = rm.score(["What is the capital of France?"], ["Paris is its capital."])
    >>> rm.device, s.dtype, bool(0.5 < s[0] <= 1.0)
    ('cpu', dtype('float64'), True)
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from assay.reward.base import RewardModelError
from assay.reward.batching import batch_scored, on_batches

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from assay.paths import Paths
    from assay.reward.base import RewardModel
    from assay.reward.kinds import RewardModelEntry

_BUILT: dict[int, RewardModel] = {}  # in the worker: model id -> built adapter


class LoadInfo(TypedDict):
    """The worker's answer to ``load``: what :class:`RemoteModel` states in-process."""

    fingerprint: str
    device: str
    conversations: bool


def _serve(conn: Connection) -> None:
    """The worker's loop. Messages: ``("path", sys.path)`` first (the parent's, so its
    entries' classes unpickle here), ``("warm", modules)`` (imported, no reply), then
    ``("load", id, entry, paths)``, ``("score", id,
    prompts, responses)``, ``("score_conversations", id, convs, responses)``; None stops. Each
    but the first gets ``("ok", value)`` or ``("err", exception)`` back, a score call first
    ``("batch", done, total)`` per scored batch."""
    from assay.reaper import watch_parent

    watch_parent()  # a SIGKILLed parent leaves no worker
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        kind, *args = msg
        if kind == "path":
            sys.path[:] = list(args[0]) + [p for p in sys.path if p not in args[0]]
            continue
        if kind == "warm":  # no reply: the load that follows raises what an import raises
            for name in args[0]:
                with contextlib.suppress(Exception):
                    importlib.import_module(name)
            continue
        mid, *args = args
        try:
            if kind == "load":
                built = _BUILT[mid] = args[0].build(args[1])
                value: object = LoadInfo(fingerprint=built.fingerprint,
                                         device=str(getattr(built, "device", "cpu")),
                                         conversations=hasattr(built, "score_conversations"))
            else:
                # each scored batch goes back as it is done: the parent's progress moves per
                # batch, not once when the whole shard's scores come back
                with on_batches(lambda done, total: conn.send(("batch", done, total))):
                    value = np.asarray(getattr(_BUILT[mid], kind)(*args), dtype=np.float64)
            reply: tuple[str, object] = ("ok", value)
        except Exception as e:  # noqa: BLE001 - sent back whole, raised there
            reply = ("err", e)
        try:
            conn.send(reply)
        except Exception as e:  # an exception that does not pickle
            conn.send(("err", RewardModelError(f"{type(reply[1]).__name__}: {reply[1]} ({e})")))


class RemoteModel:
    """A reward model built in a :class:`ScoringWorker`: ``score`` (and ``score_conversations``
    when the model has it), ``fingerprint``, ``device``, ``name``, as the adapter in-process."""

    def __init__(self, worker: ScoringWorker, mid: int, name: str, info: LoadInfo) -> None:
        self.worker, self.mid, self.name = worker, mid, name
        self.fingerprint: str = info["fingerprint"]
        self.device: str = info["device"]
        if info["conversations"]:
            self.score_conversations = self._score_conversations

    def score(self, prompts: Sequence[str], responses: Sequence[str]) -> np.ndarray:
        return self.worker.call("score", self.mid, list(prompts), list(responses))

    def _score_conversations(self, convs: Sequence[object], responses: Sequence[str]) -> np.ndarray:
        return self.worker.call("score_conversations", self.mid, list(convs), list(responses))

    def __repr__(self) -> str:
        return f"RemoteModel({self.name!r}, device={self.device!r})"


class ScoringWorker:
    """One worker process holding reward models, started at the first :meth:`load`, one call at
    a time. A fresh interpreter, not a fork: the parent has threads (generation clients) and may
    hold torch. A worker that dies fails the call in flight and every later one (its socket
    closes: the waker), naming its exit code. :meth:`close` stops it (a kill, reaped within
    ``grace_s``).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: Any = None
        self._conn: Any = None
        self._next = 0
        self._closed = False

    def __enter__(self) -> ScoringWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        import socket
        import subprocess
        from multiprocessing.connection import Connection

        ours, theirs = socket.socketpair()
        # This very assay first on the child's path: a folder named `assay` in the working
        # directory (which `python -m` and `-c` put first) must not shadow it.
        root = str(Path(__file__).resolve().parents[2])
        code = (f"import sys; sys.path.insert(0, {root!r}); "
                f"from assay.reward.worker import main; main({theirs.fileno()})")
        with theirs:
            self._proc = subprocess.Popen([sys.executable, "-c", code],
                                          pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        self._conn = Connection(ours.detach())
        self._conn.send(("path", list(sys.path)))

    def call(self, *msg: object) -> Any:
        with self._lock:
            if self._closed:
                raise RewardModelError("the scoring worker was closed")
            if self._proc is None:
                self._start()
            try:
                self._conn.send(msg)
                status, *value = self._conn.recv()
                while status == "batch":  # a batch scored there: tell this thread's listener
                    batch_scored(*value)
                    status, *value = self._conn.recv()
            except (EOFError, OSError):
                code = self._proc.wait(5)
                raise RewardModelError(
                    f"the scoring worker process died (exit code {code}) while "
                    f"running {msg[0]!r}: out of memory? run again to resume") from None
        if status == "err":
            raise value[0]
        return value[0]

    def warm(self, modules: Sequence[str]) -> None:
        """Start the worker now and have it import ``modules`` (torch's import is most of a
        model's load) while the caller goes on; the first :meth:`load` queues behind it."""
        with self._lock:
            if self._closed:
                return
            if self._proc is None:
                self._start()
            with contextlib.suppress(OSError):  # a dead worker: the next call names it
                self._conn.send(("warm", list(modules)))

    def load(self, entry: RewardModelEntry, paths: Paths | None) -> RemoteModel:
        """Build the spec's reward-model ``entry`` in the worker (``entry.build(paths)``)."""
        with self._lock:
            mid = self._next
            self._next += 1
        info = self.call("load", mid, entry, paths)
        return RemoteModel(self, mid, str(getattr(entry, "name", "")), info)

    def close(self, grace_s: float = 5.0) -> None:
        """Stop the worker: killed at once (it holds nothing to flush, and an interpreter with
        torch loaded takes ~1 s to tear down, at a run's very end), reaped within ``grace_s``.
        A call still in flight (a node interrupted mid-score) ends with the worker's death."""
        got = self._lock.acquire(timeout=grace_s)
        try:
            self._closed = True
            proc, conn = self._proc, self._conn
            if got:
                self._proc = self._conn = None
        finally:
            if got:
                self._lock.release()
        if proc is None:
            return
        proc.kill()
        with contextlib.suppress(Exception):
            proc.wait(grace_s)
        if got:
            conn.close()


def main(fd: int) -> None:
    """The worker process's entry (see :meth:`ScoringWorker._start`): serve on socket ``fd``."""
    import signal
    from multiprocessing.connection import Connection

    # Ctrl-C reaches the whole process group: the parent stops this worker itself (close), so
    # the worker prints no KeyboardInterrupt traceback of its own beside the run's error line
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _serve(Connection(fd))

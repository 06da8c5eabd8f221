"""The process's one stop: a deadline, a stall, Ctrl-C and SIGTERM all end the work in flight here.

:func:`trigger` wakes every wait registered with :func:`watch` at once (HTTP requests, grading
pools, sandboxes, model loads); :func:`call` makes any other blocking call abandonable.

Why one mechanism: each kind of stop used to reach only the thread it was raised in, while the
study graph's other threads (generation lanes waiting out ``timeout_s`` and their retries, a
grader, a scorer) ran on, and Prefect's task runner joins every one of them before the flow run
ends. Every way a run is stopped now calls :func:`trigger` (the watchdog the moment it decides,
an interrupted study graph as it unwinds), and every long wait in a stage either registers a
waker here or is abandoned through :func:`call`; nothing asks which kind of stop it was.

The stop is sticky until the next run begins (:func:`run` or :func:`clear`): a node that
starts after the trigger (a task the runner had already taken) stops at its first wait instead
of running to the end against a server that no longer answers. Each clear starts a new epoch,
so a thread the stopped run abandoned never commits into the next run (:func:`check` with the
epoch it started in).

Example:
    >>> import threading
    >>> clear()
    >>> woken = threading.Event()
    >>> with watch(woken.set):
    ...     trigger("demo")
    >>> woken.is_set(), stopped()
    (True, 'demo')
    >>> clear(); stopped() is None
    True
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")


class Cancelled(KeyboardInterrupt):
    """Raised in a stage whose work a stop cancelled. A KeyboardInterrupt, as Ctrl-C: no
    ``except Exception`` turns it into error rows or verdicts, and nothing half-done is
    committed (what was committed before the stop stays: the rerun resumes from it)."""


_lock = threading.Lock()
_reason: str | None = None
_hooks: dict[int, Callable[[], None]] = {}
_ids = itertools.count()
_changed = threading.Condition(_lock)
_epoch = 0  # how many times a run began afresh (clear)
_active = 0  # runs in progress (run)


def stopped() -> str | None:
    """Why the run was stopped (the reason given to :func:`trigger`), or None."""
    return _reason


def trigger(reason: str) -> None:
    """Stop the work in flight: every registered waker runs now, in this thread, and every
    later :func:`watch` runs its waker at once, until :func:`clear`. A second trigger keeps the
    first reason and wakes nothing more (the first already did). Bounded: wakers only schedule
    their wake-up (a cancellation, an event set), they never wait."""
    global _reason
    with _lock:
        if _reason is not None:
            return
        _reason = reason
        hooks = list(_hooks.values())
        _changed.notify_all()
    for h in hooks:
        with contextlib.suppress(Exception):  # one waker's failure must not spare the others
            h()


def clear() -> None:
    """A new run starts: the last run's stop no longer applies (a new epoch)."""
    global _reason, _epoch
    with _lock:
        _reason = None
        _epoch += 1


def epoch() -> int:
    """The current run's epoch: what :func:`check` compares against for a thread that must
    not outlive its run."""
    return _epoch


@contextlib.contextmanager
def run() -> Iterator[int]:
    """A unit of work a caller started (a study, a direct ``assay.generate`` call): the first
    of them to begin while no other is in progress clears a stop left by an earlier, finished
    run (a notebook user's Ctrl-C must not cancel their next call); one that begins inside
    another shares its stop. Yields the epoch it runs in."""
    global _active
    with _lock:
        fresh = _active == 0
        _active += 1
    try:
        if fresh and _reason is not None:
            clear()
        yield _epoch
    finally:
        with _lock:
            _active -= 1


@contextlib.contextmanager
def watch(waker: Callable[[], None]) -> Iterator[None]:
    """While the block runs, :func:`trigger` calls ``waker`` (from the triggering thread);
    if the run is already stopped, ``waker`` runs at once."""
    with _lock:
        key = next(_ids)
        _hooks[key] = waker
        now = _reason is not None
    try:
        if now:
            waker()
        yield
    finally:
        with _lock:
            _hooks.pop(key, None)


def always(waker: Callable[[], None]) -> None:
    """Call ``waker`` at every stop from now on (a module's process-wide pools: grading
    workers, sandboxes)."""
    with _lock:
        _hooks[next(_ids)] = waker


def wait(timeout: float | None) -> bool:
    """Sleep up to ``timeout`` seconds or until a stop; True when stopped."""
    with _lock:
        if _reason is None:
            _changed.wait(timeout)
        return _reason is not None


def check(since: int | None = None) -> None:
    """Raise :class:`Cancelled` when the run has been stopped, or (given the ``since`` epoch a
    thread's run began in) when that run is over and another has begun."""
    if _reason is not None:
        raise Cancelled(f"stopped: {_reason}")
    if since is not None and since != _epoch:
        raise Cancelled("stopped: the run this work belonged to is over")


def call(fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """``fn(*args, **kwargs)``, abandoned at a stop: it runs on a daemon thread (with this
    thread's context variables) and this thread returns its result or raises its error, or
    raises :class:`Cancelled` as soon as the run is stopped. For blocking calls with no waker
    of their own (a synchronous HTTP request, a local model's generation loop): what the
    abandoned thread does after the stop must not reach the store, so its commits check
    :func:`stopped` first; the process does not wait for it at exit."""
    check()
    if threading.current_thread() is threading.main_thread():
        # Ctrl-C and the watchdog's signal already reach a call in the main thread
        return fn(*args, **kwargs)
    done = threading.Event()
    out: list[T] = []

    err: list[BaseException] = []
    ctx = contextvars.copy_context()

    def target() -> None:
        try:
            out.append(ctx.run(fn, *args, **kwargs))
        except BaseException as e:  # re-raised in the caller's thread
            err.append(e)
        finally:
            done.set()
            with _lock:
                _changed.notify_all()

    threading.Thread(target=target, name=f"assay-call-{getattr(fn, '__name__', 'fn')}",
                     daemon=True).start()
    with _lock:
        # woken by the call's end or by trigger(); no timeout needed: one of the two comes
        while not done.is_set() and _reason is None:
            _changed.wait()
    if not done.is_set():
        raise Cancelled(f"stopped: {_reason}")
    if err:
        raise err[0]
    return out[0]  # type: ignore[no-any-return]


__all__ = ["Cancelled", "always", "call", "check", "clear", "epoch", "run", "stopped", "trigger",
           "wait", "watch"]

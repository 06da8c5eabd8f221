"""The deadline and stall detector (assay/watchdog.py), the progress printer, and the progress
units the grade stage advances. The detector's decisions are checked at chosen instants
(``check(now=...)``); the stops themselves wait for an event with no upper wall-clock margin."""

from __future__ import annotations

import io
import threading
import time

import pytest

import assay
from assay import progress
from assay.grading import grade
from assay.progressbar import Printer, format_state
from assay.spec import ExecutionSpec
from assay.watchdog import RunStopped, Watchdog, guard, parse_duration


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("15m", 900), ("6h", 21600),
                                          ("1h30m", 5400), ("2d", 172800), ("0.5s", 0.5),
                                          (45, 45)])
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds  # type: ignore[arg-type]


# "15": a unitless string could mean minutes or seconds
@pytest.mark.parametrize("bad", ["6 hours", "15", "m", "", "-5m", "0s", "1h-30m", True])
def test_bad_durations_name_the_forms(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)  # type: ignore[arg-type]


def test_spec_fields_validate_with_the_field_named() -> None:
    e = ExecutionSpec.model_validate({"deadline": "6h", "stall_after": "15m"})
    assert (e.deadline, e.stall_after) == ("6h", "15m")
    with pytest.raises(ValueError, match=r"deadline\n.*'6 hours' is not a duration; write e.g."):
        ExecutionSpec.model_validate({"deadline": "6 hours"})
    with pytest.raises(ValueError, match="stall_after needs runner: local"):
        ExecutionSpec.model_validate({"runner": "dask", "stall_after": "1m"})


def test_check_decides_at_chosen_instants() -> None:
    w = Watchdog(deadline_s=100.0, stall_after_s=10.0)
    t0 = w.started
    assert w.check(now=t0 + 50) is None  # nothing open: no stall, deadline not reached
    with progress.track("grade", "s shard 1/2", total=4) as unit:
        unit.advance(1)
        last = progress.last_advance()
        assert w.check(now=last + 9) is None
        stop = w.check(now=last + 11)
        assert stop is not None and stop.reason == "stall"
        assert "no progress for 11s" in str(stop)
        assert stop.in_flight == "[grade] s shard 1/2: 1/4 done"
        late = w.check(now=t0 + 101)  # the deadline wins whatever the progress
        assert late is not None and late.reason == "deadline"
        assert str(late).startswith("stopped by execution.deadline (1m40s) after 1m41s; in flight:")


def test_stall_stops_a_blocked_main_thread() -> None:
    never = threading.Event()
    with pytest.raises(RunStopped) as info:
        with guard(stall_after="0.3s"):
            with progress.track("score-rows", "m", total=2):
                never.wait()  # a wait nothing wakes: the stop must
    assert info.value.reason == "stall"
    assert info.value.in_flight == "[score-rows] m: 0/2 done"


def test_deadline_stops_work_that_keeps_advancing() -> None:
    with pytest.raises(RunStopped) as info:
        with guard(deadline="0.5s", stall_after="1h"):
            with progress.track("grade", "busy", total=None) as unit:
                while True:
                    unit.advance(1)
                    time.sleep(0.01)
    assert info.value.reason == "deadline"


def test_stop_reaches_a_worker_thread() -> None:
    got: list[BaseException] = []

    def work() -> None:
        try:
            with guard(stall_after="0.3s"):
                with progress.track("grade", "thread", total=1):
                    while True:  # a loop in Python code: the stop lands between bytecodes
                        time.sleep(0.01)
        except BaseException as e:  # noqa: BLE001
            got.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert len(got) == 1 and isinstance(got[0], RunStopped), got


def test_no_stop_after_the_block() -> None:
    with guard(stall_after="0.2s") as w:
        pass
    assert w is not None and not w._thread.is_alive()  # type: ignore[union-attr]


class Slow:
    """A verifier graded in-process (not parallel), one row at a time."""

    def __call__(self, prompt: str, completion: str, reference: str) -> float:
        return float(completion == reference)


@pytest.mark.parametrize("parallel", [False, True])
def test_grading_advances_the_stage_unit_per_row(parallel: bool) -> None:
    rows = assay.rows([f"p{i}" for i in range(20)], [["2", "3"]] * 20, references=["2"] * 20)
    events: list[int] = []
    remove = progress.listen(lambda s: events.append(s.done) if s.label == "grade-test" else None)
    try:
        with progress.track("grade", "grade-test", total=len(rows)) as unit:
            if parallel:
                from assay.verify.symbolic import MathEqual

                graded = grade(rows, MathEqual(), workers=2)
            else:
                graded = grade(rows, Slow())
            assert unit.state().done == len(rows)
    finally:
        remove()
    assert events[-1] == len(rows)  # the finish event
    assert [r["reward"] for r in graded] == [1.0, 0.0] * 20
    assert len(set(events)) > 2, events  # advanced as rows were graded, not once at the end


def test_sandbox_grading_advances_per_candidate() -> None:
    from assay.verify.code import CodeExec

    rows = assay.rows([f"p{i}" for i in range(6)], [["x = 1\n"]] * 6,
                      references=["assert x == 1"] * 6)
    dones: list[int] = []
    remove = progress.listen(lambda s: dones.append(s.done) if s.label == "sb" else None)
    try:
        with progress.track("grade", "sb", total=6) as unit:
            g = grade(rows, CodeExec(timeout=10), workers=2)
            assert unit.state().done == 6
    finally:
        remove()
    assert [r["reward"] for r in g] == [1.0] * 6
    assert sorted(set(dones)) == [1, 2, 3, 4, 5, 6], dones  # one advance per candidate


def test_printer_lines_and_bar() -> None:
    out = io.StringIO()
    p = Printer(out, every_s=0.0, tty=False)
    with progress.track("grade", "m shard 1/1", total=10) as unit:
        unit.advance(4, errors=1)
        unit.count(retries=2)
        p.tick()
    line = out.getvalue()
    assert line.startswith("[grade] m shard 1/1: 4/10 (40%), ") and line.endswith("\n")
    assert ", retries 2, errors 1, ETA " in line
    tty = io.StringIO()
    bar = Printer(tty, every_s=0.0, tty=True).start()
    with progress.track("grade", "bar", total=4) as unit:
        unit.advance(2)
        bar.tick()
    bar.stop()
    text = tty.getvalue()
    assert "\r\x1b[K[##########..........] [grade] bar: 2/4 (50%)" in text
    assert text.endswith("\r\x1b[K")  # cleared when the unit ended: the stage's line follows


def test_printer_is_silent_for_short_units() -> None:
    out = io.StringIO()
    p = Printer(out, every_s=3600.0, tty=False)
    with progress.track("grade", "quick", total=1):
        p.tick()
    assert out.getvalue() == ""


def test_format_state_without_total() -> None:
    s = progress.UnitState("decontaminate", "a", 3, None, {}, 0.0, 1.0, False)
    assert format_state(s, now=2.0) == ("[decontaminate] a: 3 done, 1.5/s, retries 0, errors 0, "
                                        "ETA ?")


def test_a_thread_no_stop_reaches_gets_the_hard_exit() -> None:
    """A worker thread blocked in a wait no exception can interrupt: after the grace period the
    watchdog's hard exit runs (in ``assay``: the error line, children killed, exit 5)."""
    release = threading.Event()
    called: list[RunStopped] = []

    def hard_exit(stop: RunStopped) -> None:
        called.append(stop)
        release.set()  # stands in for os._exit: lets the blocked thread go

    got: list[BaseException] = []

    def work() -> None:
        try:
            with guard(stall_after="0.2s", grace_s=0.2, hard_exit=hard_exit):
                with progress.track("generate", "wedged", total=1):
                    release.wait()  # not interruptible by an async exception
                    while True:  # now it is: the pending stop lands here
                        time.sleep(0.01)
        except BaseException as e:  # noqa: BLE001
            got.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert len(called) == 1 and called[0].reason == "stall"
    assert len(got) == 1 and isinstance(got[0], RunStopped)


def test_the_stop_line_names_the_stage_whichever_thread_saw_the_stop_first(monkeypatch):
    """A watchdog's stop can reach the main thread as a node's cancellation (a
    KeyboardInterrupt) before its RunStopped does: the line printed then is the same one,
    naming the stage that stopped progressing, with the same status."""
    from assay import cli
    from assay.watchdog import RunStopped, StopRun

    stop = RunStopped("stopped by execution.stall_after (20s): no progress for 20.3s", "stall",
                      "[grade] m shard 1/1: 0/3 done", "grade (m)")
    monkeypatch.setattr(StopRun, "pending", stop)
    line, rc = cli._stop_line(str(stop))
    assert line.startswith("grade (m): stopped by execution.stall_after (20s): ") and rc == 5
    line, _ = cli._stop_line("stopped by execution.deadline (1s): another run's stop")
    assert line.startswith("stopped by execution.deadline")  # not this stop: no stage to name

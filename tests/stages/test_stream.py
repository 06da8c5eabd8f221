"""Streaming generation into grading (assay.stages.stream): a shard's finished prompts are graded
while its last request is still out, its grade node grades only the rest, and the results are
the chain's byte for byte.

Proven without timing: the server holds the last prompt's requests until the verifier's log
shows an earlier prompt of the same shard graded; the log then shows every row graded once.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from helpers import logged_grader
from helpers.openai_server import OpenAIServer, scripted_policy, served_source

from assay import grading, stages
from assay.judging import Verdict, as_judge
from assay.models.generation import generate
from assay.spec import load_spec
from assay.stages import plan, stream
from assay.store import Store

LOGGED = '{{kind: function, function: "logged_grader:grade", params: {{log: "{log}"}}}}'
SPEC = "name: stream\nsources:\n" + served_source(4, LOGGED) + """measure:
  pass_at: {{k: 2}}
execution: {{shard_rows: 8, workers: 2}}
"""



def _write(tmp: Path, url: str, ids: list[str]) -> Path:
    (tmp / "logged_grader.py").write_text(logged_grader.SOURCE)
    (tmp / "a.jsonl").write_text("".join(
        json.dumps({"id": t, "q": f"What is {int(t[1:])} + {int(t[1:])}?",
                    "gold": str(2 * int(t[1:]))}) + "\n" for t in ids))
    (tmp / "spec.yaml").write_text(SPEC.format(url=url, log=tmp / "graded.log"))
    return tmp / "spec.yaml"


def _capture(monkeypatch: pytest.MonkeyPatch) -> list[stream.Pregrader]:
    made: list[stream.Pregrader] = []
    real = plan._pregrader

    def capture(*a, **k):
        p = real(*a, **k)
        made.append(p)
        return p

    monkeypatch.setattr(plan, "_pregrader", capture)
    return made


def test_finished_prompts_are_graded_while_the_shard_generates(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "graded.log"
    held: list[bool] = []
    end = [0.0]

    def policy(body: dict) -> str:
        if "What is 7 + 7?" in body["messages"][-1]["content"]:  # shard 2's last prompt
            end[0] = end[0] or time.monotonic() + 120  # one bound, not a margin
            while time.monotonic() < end[0] and not any(
                    line.split()[0] in ("t4", "t5", "t6") for line in logged_grader.graded(log)):
                time.sleep(0.02)
            held.append(time.monotonic() < end[0])
        return scripted_policy(body)

    srv = OpenAIServer(["m"], policy=policy).start()
    made = _capture(monkeypatch)
    try:
        spec = load_spec(_write(tmp_path, srv.base_url, [f"t{i}" for i in range(8)]))
        graph = stages.run_study(spec, Store(tmp_path / "g"), progress=None)
        assert held == [True, True], held  # an earlier prompt of shard 2 was graded ahead
        (ahead,) = made
        assert ahead.graded >= 2 and ahead.used == ahead.graded  # each one found by its node
        assert graph.facts == {"graded_ahead": {"rows": ahead.graded, "used": ahead.graded}}
        assert ahead.thread is not None and not ahead.thread.is_alive()
        assert ahead.state is not None and ahead.state.pregrader is None  # left the run
        counts = logged_grader.graded(log)
        assert len(counts) == 16 and set(counts.values()) == {1}, counts  # each row once

        log.unlink()
        srv.policy = scripted_policy
        store = Store(tmp_path / "c")
        chain = stages.run_study(spec, store, mode="chain", progress=None)
        assert [r.key for r in graph.results] == [r.key for r in chain.results]
        assert chain.facts == {}
        gs = Store(tmp_path / "g")
        assert stages.report_files(gs, graph.report) == stages.report_files(store, chain.report)
        assert (stages.concat_rows(gs, graph.graded["a"]).checksum()
                == stages.concat_rows(store, chain.graded["a"]).checksum())
    finally:
        srv.stop()


def test_two_prompts_of_one_task_keep_their_rollout_numbers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rollouts are numbered per task across a shard's prompts: rows built for one finished
    prompt must carry the same numbers, or the grade node would not find their verdicts."""
    srv = OpenAIServer(["m"]).start()
    made = _capture(monkeypatch)
    try:
        # t0 and t3 are asked twice each (one task, one prompt: rows of a task stay in one
        # shard; the repeated prompt's requests are sent once)
        spec = load_spec(_write(tmp_path, srv.base_url, ["t0", "t0", "t1", "t2", "t3", "t3"]))
        monkeypatch.setattr(stream.Pregrader, "BATCH", 2)
        graph = stages.run_study(spec, Store(tmp_path / "g"), progress=None)
        counts = logged_grader.graded(tmp_path / "graded.log")
        assert len(counts) == 12 and set(counts.values()) == {1}, counts
        assert {"t0 3", "t3 3"} <= set(counts)
        (ahead,) = made
        assert ahead.used == ahead.graded
        rows = stages.concat_rows(Store(tmp_path / "g"), graph.graded["a"]).to_arrow()
        assert rows.column("rollout_index").to_pylist() == [0, 1, 2, 3, 0, 1, 0, 1, 0, 1, 2, 3]
    finally:
        srv.stop()


def test_rows_built_ahead_equal_the_stored_rows(tmp_path: Path) -> None:
    """The record each verdict is memoized on is the one the grade node reads back from the
    store (else every row would be graded twice): checked on rows with references, markers,
    meta and a system prompt."""
    gens: dict[int, list] = {}
    p = stream.Pregrader(lambda s: None, 1, busy=lambda: True)
    sh = stream._Shard("a", 2, [[{"role": "system", "content": "S"},
                                 {"role": "user", "content": f"q{i}"}] for i in range(3)],
                       ["x", "y", "x"], [{"reference": "r"}] * 3, [{"m": i} for i in range(3)])
    g = generate([[{"role": "user", "content": f"q{i}"}] for i in range(3)],
                 {"kind": "function", "callable": "assay.models.function:echo"}, k=2,
                 system="S", store=Store(tmp_path), on_prompt=lambda i, r: gens.update({i: r}))
    assert sorted(gens) == [0, 1, 2]
    stored = g.rows(task_ids=["x", "y", "x"], privileged=[{"reference": "r"}] * 3,
                    meta=[{"m": i} for i in range(3)])
    from assay.rows import table_to_records

    store = Store(tmp_path / "s")  # the generate stage's rows, stored and read back
    back = table_to_records(store.get_table(store.put_table(stored.to_arrow())))
    ahead = [r for i in range(3) for r in p._rows(sh, i, gens[i])]
    assert [stream.record_key(r) for r in ahead] == [stream.record_key(r) for r in back]


def test_on_prompt_reports_each_prompt_once_journalled_ones_first(tmp_path: Path) -> None:
    store = Store(tmp_path)
    model = {"kind": "function", "callable": "assay.models.function:echo"}
    first = generate(["a", "b"], model, k=2, store=store, journal="j")
    seen: list[tuple[int, list]] = []
    g = generate(["a", "b", "c", "a"], model, k=2, store=store, journal="j",
                 on_prompt=lambda i, r: seen.append((i, r)))
    assert first.sent == 4 and g.sent == 2  # "c" asked; "a" twice and "b" from the journal
    assert [i for i, _ in seen[:3]] == [0, 1, 3] and [i for i, _ in seen[3:]] == [2]
    for i, recs in seen:
        assert recs == g.records[i * 2:(i + 1) * 2]


def test_known_verdicts_are_not_graded_again() -> None:
    calls: list[str] = []

    def judge(row):
        calls.append(row["final_text"])
        return 1.0

    recs = [{"prompt": "p", "final_text": t} for t in "abc"]
    out = grading.judge_records(as_judge(judge), recs,
                                known=[None, Verdict(0.5, "ok", "earlier"), None])
    assert calls == ["a", "c"] and [v.reward for v in out] == [1.0, 0.5, 1.0]
    with pytest.raises(ValueError, match="known: 1 entries for 3 records"):
        grading.judge_records(as_judge(judge), recs, known=[None])


def test_a_background_call_yields_the_workers_and_a_foreground_one_waits_for_it() -> None:
    from assay.verify.symbolic import MathEqual

    judge = as_judge(MathEqual())
    recs = [{"prompt": "p", "final_text": "2", "privileged": {"reference": "2"}}] * 4
    pool = grading._shared_pool()
    assert pool.lock.acquire(timeout=30)
    try:  # someone holds the warm workers: a background call never forks its own
        with pytest.raises(grading.GradingBusy):
            grading.judge_records(judge, recs, workers=2, background=True)
    finally:
        pool.lock.release()
    forks: list[int] = []
    real = grading._fork_slots

    def counting(ctx, j, n):
        forks.append(0 if j is None else n)  # n workers forked holding this call's judge
        return real(ctx, j, n)

    grading._fork_slots = counting
    try:
        pool.background = True
        assert pool.lock.acquire(timeout=30)
        release = threading.Timer(0.3, lambda: (setattr(pool, "background", False),
                                                pool.lock.release()))
        release.start()
        # a background holder: this call waits for it and uses the shared workers
        out = grading.judge_records(judge, recs, workers=2)
        release.join()
    finally:
        grading._fork_slots = real
    assert [v.reward for v in out] == [1.0] * 4 and sum(forks) == 0


def test_close_is_bounded_and_leaves_the_run() -> None:
    from assay.stages.declare import RunState

    state = RunState()
    p = stream.Pregrader(lambda s: None, 1, busy=lambda: True).start(state)
    assert state.pregrader is p
    p.close()
    assert state.pregrader is None and not p.thread.is_alive()

"""Progress of reward-model scoring moves: score-rows says it is loading the model, then
advances per scored batch (in-process and from the scoring worker), never one `0/N, ETA ?`
for the whole shard (issue 47)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from helpers.reward_fixtures import SENTENCES, tiny_rm_dir  # noqa: F401 - a fixture

from assay import progress, stages
from assay.progress import UnitState
from assay.reward.batching import on_batches
from assay.spec import load_spec
from assay.stages.score_rows import clear_model_cache
from assay.store import Store

ROWS = 24


def _spec(tmp: Path, rm_dir: Path) -> Path:
    with open(tmp / "a.jsonl", "w") as f:
        for i in range(ROWS):  # distinct completions: each row is one item to score
            s = SENTENCES[(i // 2) % len(SENTENCES)]
            f.write(json.dumps({"id": f"t{i // 2}", "q": s, "a": f"{s} ({i})", "gold": "x"})
                    + "\n")
    p = tmp / "s.yaml"
    # batch_tokens small enough that the shard's rows go in several batches
    p.write_text(f"""
name: rm-progress
sources:
  - name: m
    kind: file
    path: a.jsonl
    fields: {{prompt: q, completion: a, reference: gold, task_id: id}}
    verifier: {{kind: exact_match}}
reward:
  models:
    - {{name: tiny, kind: hf, path: "{rm_dir}", params: {{device: cpu, batch_tokens: 160}}}}
  data: null
  score: {{sources: [m]}}
measure: {{pass_at: {{k: 2}}}}
""")
    return p


def test_score_rows_shows_loading_then_advances_per_batch(tmp_path: Path,
                                                          tiny_rm_dir: Path) -> None:  # noqa: F811
    clear_model_cache()  # the load is part of what is shown
    spec = load_spec(_spec(tmp_path, tiny_rm_dir))
    seen: list[UnitState] = []
    unlisten = progress.listen(lambda s: seen.append(s) if s.stage == "score-rows" else None)
    try:
        stages.run_study(spec, Store(tmp_path / "st"), progress=None, workers=1)
    finally:
        unlisten()
        clear_model_cache()
    assert seen, "score-rows opened no progress unit"
    assert all(s.total == ROWS for s in seen)
    loading = [s for s in seen if s.phase is not None]
    assert loading and loading[0].phase == "loading reward model tiny" and loading[0].done == 0
    # after the load: several advances part-way, each with a rate timed from the load's end
    moving = [s for s in seen if s.phase is None and 0 < s.done < ROWS and not s.finished]
    assert len({s.done for s in moving}) >= 2, [(s.done, s.phase) for s in seen]
    assert all(s.working_since is not None and s.rate > 0 for s in moving)
    assert seen[-1].finished and seen[-1].done == ROWS
    dones = [s.done for s in seen]
    assert dones == sorted(dones)  # never backwards


def test_scoring_worker_relays_each_batch(tiny_rm_dir: Path) -> None:  # noqa: F811
    """A model in the scoring worker process reports its batches back to the caller's
    listener as they are scored, with the same scores as the model in-process."""
    from assay.paths import SpecPaths
    from assay.reward.kinds import HFModel
    from assay.reward.worker import ScoringWorker

    entry = HFModel(name="tiny", kind="hf", path=str(tiny_rm_dir),
                    params={"device": "cpu", "batch_tokens": 96})
    prompts = [s.split("?")[0] + "?" for s in SENTENCES]
    answers = [f"{s} #{i}" for i, s in enumerate(SENTENCES)]
    here: list[tuple[int, int]] = []
    local = entry.build(SpecPaths())
    with on_batches(lambda d, t: here.append((d, t))):
        want = local.score(prompts, answers)
    relayed: list[tuple[int, int]] = []
    with ScoringWorker() as w:
        rm = w.load(entry, SpecPaths())
        with on_batches(lambda d, t: relayed.append((d, t))):
            got = rm.score(prompts, answers)
        again = rm.score(prompts, answers)  # no listener: nothing to tell, same scores
    assert len(here) >= 2 and relayed == here
    assert relayed[-1] == (len(SENTENCES), len(SENTENCES))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(again, want)


def test_row_advance_never_passes_the_rows() -> None:
    from assay.reward.batching import RowAdvance

    class Sink:
        def __init__(self) -> None:
            self.calls: list[int] = []

        def advance(self, n: int) -> None:
            self.calls.append(n)

    sink = Sink()
    adv = RowAdvance(sink, 10)
    for done in (3, 3, 7, 7):  # a pass of 7 items (duplicates scored once) over 10 rows
        adv(done, 7)
    adv.finish()
    assert sink.calls == [10 * 3 // 7, 10 - 10 * 3 // 7]  # repeats add nothing
    cut = Sink()
    adv = RowAdvance(cut, 10)
    adv(3, 7)  # a model that stopped reporting: finish() still ends at the rows
    adv.finish()
    adv.finish()
    assert cut.calls == [4, 6]


def test_audit_advances_per_batch(tmp_path: Path, tiny_rm_dir: Path) -> None:  # noqa: F811
    """score-reward-model's audit moves its unit per scored batch of each view, ending at the
    views' items (it used to advance once, after the whole diagnostic set)."""
    from assay.data import DataView, make_pair
    from assay.reward import HFRewardModel, audit

    views = {ax: DataView([make_pair(f"{SENTENCES[i % 9]} ({ax} {i})", f"Yes: {SENTENCES[i % 9]}",
                                     "No.", ax, seed_id=f"{ax}{i}", builder_id="h")
                           for i in range(10)]) for ax in ("x", "y")}
    model = HFRewardModel(tiny_rm_dir, device="cpu", batch_tokens=160)
    done: list[int] = []

    class Sink:
        def advance(self, n: int) -> None:
            done.append((done[-1] if done else 0) + n)

    audit(model, views, store=tmp_path / "st", unit=Sink())
    assert done[-1] == 20 and len(done) > 2, done
    assert 10 in done  # the first view ends at its own items, then the second goes on
    cached: list[int] = []

    class Again:
        def advance(self, n: int) -> None:
            cached.append(n)

    audit(model, views, store=tmp_path / "st", unit=Again())  # read from the store: per view
    assert cached == [10, 10]


def test_scoring_worker_ignores_ctrl_c(capfd) -> None:  # noqa: ANN001 - pytest's fixture
    """Ctrl-C reaches the whole process group; the parent stops its scoring worker itself, so
    the worker neither dies of it nor prints a KeyboardInterrupt traceback (issue 47)."""
    import os
    import signal

    from assay.paths import SpecPaths
    from assay.reward.kinds import FunctionModel
    from assay.reward.worker import ScoringWorker

    entry = FunctionModel(name="len", kind="function",
                          function="assay.reward.function:length_rewards")
    with ScoringWorker() as w:
        rm = w.load(entry, SpecPaths())  # the worker is up and serving
        os.kill(w._proc.pid, signal.SIGINT)
        for _ in range(3):  # served after the signal: the worker took it without dying
            assert rm.score(["Q"], ["four"]).tolist() == [4.0]
        assert w._proc.poll() is None
    assert "KeyboardInterrupt" not in capfd.readouterr().err

"""The graph loads the row-scoring model while the server generates (plan.Preloader), once per
process, and the results stay the chain's byte for byte.

The overlap is proven without timing: the server answers its first request at once and holds
every later one until the model is in the process's cache. Without the preload the model loads
only at score-rows, after the last completion, so the held requests would run out their bound.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from helpers import reward_fixtures
from helpers.openai_server import OpenAIServer, scripted_policy, served_source

from assay import stages
from assay.reward.worker import RemoteModel
from assay.spec import load_spec
from assay.stages import score_rows
from assay.stages.plan import Preloader
from assay.store import Store

tiny_rm_dir = reward_fixtures.tiny_rm_dir

SPEC = """
name: preload
sources:
""" + served_source(1, "{{kind: exact_match}}") + """reward:
  models:
    - {{name: tiny, kind: hf, path: {rm}, params: {{device: cpu}}}}
  data: null
  score: {{sources: [a]}}
execution: {{shard_rows: 4}}
"""


def test_model_loads_during_generation_once_and_results_match_the_chain(
        tmp_path: Path, tiny_rm_dir: Path) -> None:
    held: list[bool] = []  # per held request: whether the model was loaded within the bound
    loaded: dict = {}  # the models loaded while requests were held
    seen = [0]
    end = [0.0]

    def policy(body: dict) -> str:
        seen[0] += 1  # one connection: requests arrive one at a time
        if seen[0] > 1:
            # one bound for all held requests, not a margin: the load takes seconds
            end[0] = end[0] or time.monotonic() + 120
            while not score_rows._MODELS and time.monotonic() < end[0]:
                time.sleep(0.02)
            held.append(bool(score_rows._MODELS))
            loaded.update(score_rows._MODELS)
        return scripted_policy(body)

    srv = OpenAIServer(["m"], policy=policy).start()
    try:
        (tmp_path / "a.jsonl").write_text("".join(
            json.dumps({"id": f"t{i}", "q": f"What is {i} + {i}?", "gold": str(2 * i)}) + "\n"
            for i in range(4)))
        (tmp_path / "spec.yaml").write_text(SPEC.format(url=srv.base_url, rm=tiny_rm_dir))
        spec = load_spec(tmp_path / "spec.yaml")
        assert Preloader.wanted(spec)
        score_rows.clear_model_cache()
        graph = stages.run_study(spec, Store(tmp_path / "g"), progress=None)
        assert len(held) == 7 and all(held), held  # 4 prompts x k=2, the first not held
        # one load, in the scoring worker's process, shared by both score-rows shards; the
        # worker stopped with the run, and its models were forgotten
        (model,) = loaded.values()
        assert isinstance(model, RemoteModel) and model.mid == 0 and model.worker._next == 1
        assert model.worker._proc is None and score_rows._MODELS == {}
        assert sum(r.stage == "score-rows" and not r.cached for r in graph.results) == 2

        score_rows.clear_model_cache()
        held.clear()
        srv.policy = scripted_policy  # the chain never preloads: nothing to hold for
        store = Store(tmp_path / "c")
        chain = stages.run_study(spec, store, mode="chain", progress=None)
        assert [r.key for r in graph.results] == [r.key for r in chain.results]
        gs, cs = Store(tmp_path / "g"), store
        # the scores from the worker and the chain's in-process ones: the same bytes
        assert stages.report_files(gs, graph.report) == stages.report_files(cs, chain.report)
        for name in graph.graded:
            assert (stages.concat_rows(gs, graph.graded[name]).checksum()
                    == stages.concat_rows(cs, chain.graded[name]).checksum())
    finally:
        srv.stop()
        score_rows.clear_model_cache()


def test_nothing_loads_when_every_completion_is_cached(tmp_path: Path, tiny_rm_dir: Path) -> None:
    srv = OpenAIServer(["m"]).start()
    try:
        (tmp_path / "a.jsonl").write_text(json.dumps({"id": "t", "q": "1+1?", "gold": "2"}) + "\n")
        (tmp_path / "spec.yaml").write_text(SPEC.format(url=srv.base_url, rm=tiny_rm_dir))
        spec = load_spec(tmp_path / "spec.yaml")
        store = Store(tmp_path / "s")
        stages.run_study(spec, store, progress=None)
        # the same completions, a new verifier: grading reruns, scores come from the row-score
        # cache, and no generate shard asks the server, so nothing preloads
        score_rows.clear_model_cache()
        text = (tmp_path / "spec.yaml").read_text().replace("exact_match", "numeric")
        (tmp_path / "spec.yaml").write_text(text)
        n = len(srv.requests)
        run = stages.run_study(load_spec(tmp_path / "spec.yaml"), store, progress=None)
        assert len(srv.requests) == n
        assert any(r.stage == "grade" and not r.cached for r in run.results)
        assert score_rows._MODELS == {}
    finally:
        srv.stop()
        score_rows.clear_model_cache()


class _SlowModel:
    """A model spec whose build blocks until a second caller is waiting for the same model."""

    def __init__(self) -> None:
        self.builds = 0
        self.release = threading.Event()

    def build(self, paths: object) -> object:
        self.builds += 1
        self.release.wait(60)
        return object()


def _waits_in_model(t: threading.Thread) -> bool:
    """Whether thread ``t`` is blocked in ``_model``'s wait for a load in flight (not in a
    build of its own)."""
    f = sys._current_frames().get(t.ident or -1)
    while f is not None:
        if f.f_code.co_name == "wait" and f.f_back is not None \
                and f.f_back.f_code is score_rows._model.__code__:
            return True
        f = f.f_back
    return False


def test_two_callers_share_one_load() -> None:
    score_rows.clear_model_cache()
    m = _SlowModel()
    got: list[object] = []
    study = SimpleNamespace(paths=None)  # _model reads only the study's paths
    ts = [threading.Thread(target=lambda: got.append(score_rows._model(m, study, ["id"])))
          for _ in range(2)]
    try:
        ts[0].start()
        end = time.monotonic() + 60
        while not score_rows._LOADING and time.monotonic() < end:  # the first caller loads
            time.sleep(0.005)
        assert score_rows._LOADING
        ts[1].start()
        end = time.monotonic() + 60
        while not _waits_in_model(ts[1]) and time.monotonic() < end:  # the second one waits
            time.sleep(0.005)
        m.release.set()
        for t in ts:
            t.join(60)
        assert m.builds == 1 and len(got) == 2 and got[0] is got[1]
    finally:
        score_rows.clear_model_cache()


def test_grading_gives_the_load_a_core_while_it_runs(tmp_path: Path, tiny_rm_dir: Path,
                                                     monkeypatch) -> None:
    # The load is CPU work every score-rows node waits for: a shard graded while it runs gets
    # one worker fewer. The load is held until the first grade call has recorded its workers
    # (so that call ran during the load, whatever the timing); a run without a preload grades
    # with all of them.
    import assay.grading as grading
    from assay.stages import plan

    seen: list[int | None] = []
    loading = threading.Event()
    first_grade = threading.Event()
    real_grade, real_preload = grading.grade, plan.preload

    def grade(rows, verifier, *, workers=None, known=None):
        seen.append(workers)
        first_grade.set()
        return real_grade(rows, verifier, workers=workers, known=known)

    def preload(spec, worker=None):
        loading.set()
        first_grade.wait(120)  # a bound: the assertions below fail if it is ever reached
        return real_preload(spec, worker)

    monkeypatch.setattr(grading, "grade", grade)
    monkeypatch.setattr(plan, "preload", preload)
    srv = OpenAIServer(["m"]).start()
    try:
        (tmp_path / "a.jsonl").write_text("".join(
            json.dumps({"id": f"t{i}", "q": f"What is {i} + {i}?", "gold": str(2 * i)}) + "\n"
            for i in range(4)))
        text = SPEC.format(url=srv.base_url, rm=tiny_rm_dir).replace(
            "{shard_rows: 4}", "{shard_rows: 4, workers: 3}")
        (tmp_path / "spec.yaml").write_text(text)
        spec = load_spec(tmp_path / "spec.yaml")
        score_rows.clear_model_cache()
        stages.run_study(spec, Store(tmp_path / "g"), progress=None)
        assert loading.is_set() and seen[0] == 2 and set(seen) <= {2, 3}
        seen.clear()
        stages.run_study(spec, Store(tmp_path / "n"), progress=None, preload=False)
        assert seen and set(seen) == {3}
    finally:
        srv.stop()
        score_rows.clear_model_cache()


def test_grading_workers_while_loading() -> None:
    from assay.grading import cores
    from assay.stages.plan import _grading_workers

    loader = Preloader(SimpleNamespace())
    assert _grading_workers(4, None) == 4 and _grading_workers(4, loader) == 4  # none started
    loader.thread = threading.Thread(target=lambda: None)  # started, not ended
    assert (_grading_workers(4, loader), _grading_workers(1, loader)) == (3, 1)
    assert _grading_workers(None, loader) == max(1, cores() - 1)
    loader._ended.set()
    assert _grading_workers(4, loader) == 4 and _grading_workers(None, loader) is None


def test_the_loader_also_warms_the_measure_and_report_imports(tmp_path: Path) -> None:
    # After the model, the loader imports what measure and the report (the run's last two
    # nodes) compute and draw with. A fresh interpreter: nothing there has imported them yet.
    # The bundled MiniLM, which loads without transformers (that would import scipy.special).
    import subprocess

    spec = SPEC.format(url="http://127.0.0.1:9", rm="unused").replace(
        "{name: tiny, kind: hf, path: unused, params: {device: cpu}}",
        "{name: mini, kind: embedding, params: {device: cpu}}")
    assert "kind: embedding" in spec
    (tmp_path / "spec.yaml").write_text(spec)
    code = (
        "import json, sys, time; from assay.spec import load_spec; "
        "from assay.stages.plan import Preloader; from assay.progress import UnitState; "
        "from assay.stages import score_rows; "
        "seen = lambda: ['matplotlib.backends.backend_agg' in sys.modules, "
        "'scipy.special' in sys.modules]; "
        "before = seen(); loader = Preloader(load_spec(sys.argv[1])); "
        "loader(UnitState('generate', 'a shard 1/1', 0, 4, {}, 0.0, 0.0, False)); "
        "loader.join(); "
        "print(json.dumps([before, len(score_rows._MODELS), seen(), "
        "'matplotlib.pyplot' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "spec.yaml")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [[False, False], 1, [True, True],
                                                               False]

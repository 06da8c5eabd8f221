"""kind: lm_eval never reports a number lm-eval would not give: a metric or aggregation assay
does not compute, a filter, task code that exits — each one
error naming the source and the task, before any data loads where the index already says so;
and lm-eval's task index is built once per process for every source that shares it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("lm_eval")

ROOT = Path(__file__).resolve().parents[2]

HEAD = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files: {{test: {data}}}
test_split: test
"""
MC = HEAD + """output_type: multiple_choice
doc_to_text: "{{{{q}}}}"
doc_to_choice: ["yes", "no"]
doc_to_target: a
"""
ROLLING = HEAD + """output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{{{q}}}}"
"""
UTILS = '''
def mc2(doc, results):  # the shape of truthfulqa_mc2's: its own number, not acc
    return {"acc": 0.5}


def own_agg(items):  # an aggregation of the task's own file: rows cannot name it
    return 0.0


def own_counts(doc, results):  # a perplexity counted differently from lm-eval's pairs
    (ll,) = results
    return {"word_perplexity": (ll, 3), "bits_per_byte": (2 * ll, 9)}


def exits(dataset):
    exit("this task needs a package that is not installed")
'''
EXITS_ON_IMPORT = 'import sys\nsys.exit("slr_bench: a dependency is missing")\n\n' \
                  'def process_docs(dataset):\n    return dataset\n'
PY_TASK = '''
from lm_eval.api.task import ConfigurableTask


class OwnResults(ConfigurableTask):
    def __init__(self, config=None):
        super().__init__(config={k: v for k, v in (config or {}).items() if k != "class"})

    def process_results(self, doc, results):
        return {"acc": 1.0}
'''
TASKS = {  # name: (the templated head, what follows it)
    "lmx_ok": (MC, "metric_list: [{metric: acc}, {metric: acc_norm, aggregation: mean}]\n"),
    "lmx_ok_too": (MC, ""),
    "lmx_mc2": (MC, "process_results: !function utils.mc2\nmetric_list: [{metric: acc}]\n"),
    "lmx_cola": (MC, "metric_list: [{metric: mcc}]\n"),
    "lmx_f1": (MC, "metric_list: [{metric: acc}, {metric: f1}]\n"),
    "lmx_median": (MC, "metric_list: [{metric: acc, aggregation: median}]\n"),
    "lmx_own_agg": (MC, "metric_list: [{metric: acc, aggregation: !function utils.own_agg}]\n"),
    "lmx_brier": (MC, "metric_list: [{metric: acc}, {metric: brier_score}]\n"),
    "lmx_mc2_median": (MC, "process_results: !function utils.mc2\n"
                       "metric_list: [{metric: acc, aggregation: median}]\n"),
    "lmx_filtered": (MC, "filter_list: [{name: x, filter: [{function: take_first}]}]\n"),
    "lmx_rolling_own": (ROLLING, "process_results: !function utils.own_counts\n"
                        "metric_list: [{metric: word_perplexity}, {metric: bits_per_byte}]\n"),
    "lmx_exit_call": (MC, "process_docs: !function utils.exits\n"),
    "lmx_exit_import": (MC, "process_docs: !function slr.process_docs\n"),
    # members whose data does not exist: a group is refused before any member loads
    "lmx_lost_a": (MC.replace("{data}", "{missing}"), "tag: lmx_lost_tag\n"),
    "lmx_lost_b": (MC.replace("{data}", "{missing}"), "tag: lmx_lost_tag\n"),
}


@pytest.fixture
def world(tmp_path: Path) -> Path:
    from assay.sources.lm_eval_index import forget

    forget()  # each test's folder is new, but start from an empty cache all the same
    (tmp_path / "d.jsonl").write_text("".join(
        json.dumps({"q": f"is {i} even?", "a": i % 2}) + "\n" for i in range(4)))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    for name, (head, rest) in TASKS.items():
        (tasks / f"{name}.yaml").write_text(head.format(
            name=name, data=tmp_path / "d.jsonl", missing=tmp_path / "no-such.jsonl") + rest)
    (tasks / "group.yaml").write_text("group: lmx_group\ntask: [lmx_lost_a, lmx_lost_b]\n")
    (tasks / "py.yaml").write_text(MC.format(name="lmx_py", data=tmp_path / "d.jsonl")
                                   + "class: !function own.OwnResults\n")
    (tasks / "utils.py").write_text(UTILS)
    (tasks / "slr.py").write_text(EXITS_ON_IMPORT)
    (tasks / "own.py").write_text(PY_TASK)
    return tmp_path


def _spec(base: Path, *tasks: str, mode: str = "choices") -> Any:
    from assay.spec import parse_spec

    sources = [{"name": f"s{i}", "kind": "lm_eval", "task": t, "include_path": "tasks",
                mode: {"model": {"kind": "hf", "path": "m"}}} for i, t in enumerate(tasks)]
    text = yaml.safe_dump({"version": 1, "name": "x", "sources": sources})
    (base / "x.yaml").write_text(text)
    return parse_spec(text, source="x.yaml", base_dir=str(base))


def _problem(base: Path, task: str, mode: str = "choices") -> str:
    from assay.spec import check_data

    spec = _spec(base, task, mode=mode)
    problems, _ = check_data(spec)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"sources[0].task: source 's0' (lm-eval task {task!r})")
    return problems[0]


@pytest.mark.parametrize(("task", "why"), [
    ("lmx_brier", "asks for 'brier_score', which assay does not compute"),
    ("lmx_own_agg", "'acc' is aggregated by 'own_agg', a function of the task's own file"),
    ("lmx_filtered", "filter_list"),
])
def test_refuses_what_it_would_not_compute(world: Path, task: str, why: str) -> None:
    """A metric assay does not compute (brier_score), an aggregation defined in the task's own
    file (rows cannot name it for the measure stage), a filter: refused by check (what
    validate runs), naming the source, the task and the metric; the same tasks' data loads
    fine, so before this each silently gave acc under the task's name."""
    import re

    assert re.search(why, _problem(world, task))
    assert _spec(world, "lmx_ok").sources[0].check(_spec(world, "lmx_ok").paths) == ([], [])


@pytest.mark.parametrize("task", ["lmx_mc2", "lmx_cola", "lmx_f1", "lmx_median",
                                  "lmx_mc2_median"])
def test_own_process_results_mcc_and_f1_are_computed(world: Path, task: str) -> None:
    """A task's own process_results (truthfulqa_mc2's shape), mcc, f1 and a median (lm-eval's
    function on the kept items): computed now (tests/sources/test_lm_eval_mc.py and
    test_lm_eval_corpus.py check the numbers against lm-eval), so check passes; before, each
    was refused."""
    spec = _spec(world, task)
    assert spec.sources[0].check(spec.paths) == ([], [])


def test_refusal_by_the_index_needs_no_data(world: Path) -> None:
    """The index's config decides: a task refused for its metrics is refused even when its data
    cannot load (no data is read for a task that will be refused)."""
    from assay.errors import SpecError

    text = (world / "tasks" / "lmx_brier.yaml").read_text()
    (world / "tasks" / "lmx_brier.yaml").write_text(
        text.replace(str(world / "d.jsonl"), str(world / "gone.jsonl")))
    spec = _spec(world, "lmx_brier")
    with pytest.raises(SpecError, match="'brier_score'"):
        spec.sources[0].build(spec.paths)


def test_python_task_class_with_its_own_process_results(world: Path) -> None:
    """A Python task class (``class:``) overriding process_results is refused once loaded
    (its index entry cannot say)."""
    assert "Python class OwnResults computes its metrics" in _problem(world, "lmx_py")


def test_rolling_task_with_counts_not_lm_eval_pairs(world: Path) -> None:
    """A rolling task whose process_results does not return (log-likelihood, count) pairs
    (bits_per_byte from twice the log-likelihood) is refused per document; before this its
    counts were read as if they were lm-eval's."""
    p = _problem(world, "lmx_rolling_own", mode="perplexity")
    assert "document 0: its process_results returns 'bits_per_byte'" in p


@pytest.mark.parametrize("task", ["lmx_group", "lmx_lost_tag"])
def test_groups_and_tags_expand_before_any_data_loads(world: Path, task: str) -> None:
    """A group or tag whose members' data does not exist: expanded from the index into one
    source per member at parse (before, lm-eval loaded every member first and failed on the
    missing data); tests/sources/test_lm_eval_group.py has the rest."""
    spec = _spec(world, task)
    assert [(s.name, s.task) for s in spec.sources] == [("s0.lmx_lost_a", "lmx_lost_a"),
                                                        ("s0.lmx_lost_b", "lmx_lost_b")]


def test_unknown_task_suggests_close_names(world: Path) -> None:
    assert "did you mean 'lmx_cola'" in _problem(world, "lmx_colaa")


def test_one_task_index_per_process(world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spec with two lm_eval sources on one include_path, validated then built: lm-eval's
    TaskManager is constructed once; a YAML added to the folder re-indexes it."""
    import lm_eval.tasks

    from assay.spec import check_data

    built: list[Any] = []

    class Counting(lm_eval.tasks.TaskManager):  # type: ignore[misc,name-defined]
        def __init__(self, *a: Any, **kw: Any) -> None:
            built.append(kw.get("include_path"))
            super().__init__(*a, **kw)

    monkeypatch.setattr(lm_eval.tasks, "TaskManager", Counting)
    spec = _spec(world, "lmx_ok", "lmx_ok_too")
    assert check_data(spec) == ([], [])
    for s in spec.sources:
        assert len(s.build(spec.paths)[0]) == 4
    assert built == [str(world / "tasks")]
    (world / "tasks" / "later.yaml").write_text(
        MC.format(name="lmx_later", data=world / "d.jsonl"))
    spec = _spec(world, "lmx_later")
    assert len(spec.sources[0].build(spec.paths)[0]) == 4
    assert len(built) == 2


@pytest.mark.parametrize("task", ["lmx_exit_call", "lmx_exit_import"])
def test_task_code_calling_exit_is_one_error(world: Path, task: str) -> None:
    """Task code that calls exit() (at import, as slr_bench's does, or in process_docs): assay
    validate exits 2 with one error naming the source and the task, no traceback."""
    spec = _spec(world, task)
    assert spec.sources[0].task == task
    p = subprocess.run([sys.executable, "-m", "assay.cli", "validate", str(world / "x.yaml")],
                       capture_output=True, text=True, timeout=300, cwd=world)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert p.stderr.count("error:") == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert f"source 's0' (lm-eval task {task!r}): the task's own code called exit(" in p.stderr


@pytest.mark.slow  # lm-eval's whole index (13,000 YAMLs)
def test_lm_eval_own_truthfulqa_mc2_and_cola_pass_the_index() -> None:
    """lm-eval's shipped truthfulqa_mc2 (its own process_results) and cola (mcc) pass the
    index's checks now (they were refused), offline; the mmlu group is one for a spec to
    expand; arc_easy (acc only) passes too."""
    import os

    from assay.errors import SpecError
    from assay.sources.lm_eval_index import task_entry, task_manager, yaml_config
    from assay.sources.lm_eval_metrics import config_refusal

    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    tm = task_manager(None)
    with pytest.raises(SpecError, match="is an lm-eval group of"):  # a spec expands it
        task_entry(tm, "mmlu", "x")
    for task in ("arc_easy", "truthfulqa_mc2", "cola"):
        assert config_refusal(yaml_config(task_entry(tm, task, "x"))) is None, task

"""kind: lm_eval with an lm-eval group or tag as ``task``: expanded from the index into one
source per leaf task before any data loads, members' refusals named before any data loads, and
the group's aggregate and stderr equal to simple_evaluate's (weight_by_size true and false,
a subgroup inside a group), computed by lm-eval's own functions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("lm_eval")

WINDOW = 48
SIZES = {"lmg_a": 5, "lmg_b": 8, "lmg_c": 3}  # unequal: size-weighted and plain means differ
TASK = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files: {{test: {data}}}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{q}}}}"
doc_to_choice: ["yes", "no, never"]
doc_to_target: a
metric_list: [{{metric: acc}}, {{metric: acc_norm}}]
tag: lmg_tag
"""
GROUPS = {
    # every member by size, acc and acc_norm
    "lmg_sized": {"group": "lmg_sized", "task": ["lmg_a", "lmg_b", "lmg_c"],
                  "aggregate_metric_list": [{"metric": "acc", "weight_by_size": True},
                                            {"metric": "acc_norm", "weight_by_size": True}]},
    # a plain mean over a subgroup's leaves and a task; the subgroup is size-weighted
    "lmg_plain": {"group": "lmg_plain", "task": ["lmg_sub", "lmg_c"],
                  "aggregate_metric_list": [{"metric": "acc", "weight_by_size": False}]},
    "lmg_sub": {"group": "lmg_sub", "task": ["lmg_a", "lmg_b"],
                "aggregate_metric_list": [{"metric": "acc", "weight_by_size": True}]},
    # no aggregate_metric_list: lm-eval reports none
    "lmg_none": {"group": "lmg_none", "task": ["lmg_a", "lmg_c"]},
    # metrics lm-eval aggregates over a corpus (f1, mcc), each member's value then meaned
    "lmg_f1": {"group": "lmg_f1", "task": ["lmg_fa", "lmg_fb"],
               "aggregate_metric_list": [{"metric": "f1", "weight_by_size": True},
                                         {"metric": "mcc", "weight_by_size": False},
                                         {"metric": "acc", "weight_by_size": True}]},
}
#: the corpus-metric members (no tag: the tag's members stay lmg_a..c); unequal sizes
F1_SIZES = {"lmg_fa": 9, "lmg_fb": 14}
F1_METRICS = "[{metric: acc}, {metric: f1}, {metric: mcc}]"
WORDS = ["red", "blue", "seven", "cat", "river", "stone", "green", "nine", "dog", "hill"]


def _tasks(base: Path, data: bool = True) -> Path:
    tasks = base / "tasks"
    tasks.mkdir(parents=True, exist_ok=True)
    for k, (name, n) in enumerate(SIZES.items()):
        f = base / f"{name}.jsonl"
        if data:
            f.write_text("".join(json.dumps(
                {"q": f"is the {WORDS[(i + k) % 10]} {WORDS[(3 * i + k) % 10]} here?",
                 "a": (i + k) % 2}) + "\n" for i in range(n)))
        (tasks / f"{name}.yaml").write_text(TASK.format(name=name, data=f))
    for k, (name, n) in enumerate(F1_SIZES.items()):
        f = base / f"{name}.jsonl"
        if data:  # the tiny model picks "yes" (the shorter choice): its place is the
            # prediction, gold labels a pattern of their own, so f1 and mcc are neither 0 nor 1
            f.write_text("".join(json.dumps(
                {"q": f"is the {WORDS[(i * 7 + k) % 10]} {WORDS[(i + 2 * k) % 10]} here?",
                 "c": ["yes", "no, never"][::1 if (5 * i + k) % 3 else -1],
                 "a": (i * i + i // 4 + k) % 2}) + "\n" for i in range(n)))
        (tasks / f"{name}.yaml").write_text(
            TASK.format(name=name, data=f).replace("tag: lmg_tag\n", "")
            .replace('["yes", "no, never"]', '"{{c}}"')
            .replace("[{metric: acc}, {metric: acc_norm}]", F1_METRICS))
    for name, g in GROUPS.items():
        (tasks / f"{name}.yaml").write_text(yaml.safe_dump(g))
    return tasks


def _parse(base: Path, task: str, measure: dict[str, Any] | None = None,
           model: dict[str, Any] | None = None) -> Any:
    from assay.spec import parse_spec

    src = {"name": "g", "kind": "lm_eval", "task": task, "include_path": "tasks",
           "choices": {"model": model or {"kind": "hf", "path": "m"}}}
    doc = {"version": 1, "name": "x", "sources": [src], "measure": measure or {}}
    return parse_spec(yaml.safe_dump(doc), source="x.yaml", base_dir=str(base))


@pytest.fixture
def fresh_index() -> None:
    from assay.sources.lm_eval_index import forget

    forget()


def test_group_expands_from_the_index_without_data(tmp_path: Path, fresh_index: None) -> None:
    """No data file exists: the group still expands into one source per leaf (a subgroup's
    leaves included, in lm-eval's order), each an lm_eval source of its own task; a group's
    name in a measure's sources stands for its members; a tag expands too."""
    _tasks(tmp_path, data=False)
    spec = _parse(tmp_path, "lmg_plain", {"choice_accuracy": {"sources": ["g"]}})
    assert [(s.name, s.task) for s in spec.sources] == [
        ("g.lmg_a", "lmg_a"), ("g.lmg_b", "lmg_b"), ("g.lmg_c", "lmg_c")]
    assert spec.measure.choice_accuracy.sources == ["g.lmg_a", "g.lmg_b", "g.lmg_c"]
    (g,) = spec.lm_eval_groups
    assert g["tree"]["children"][0]["name"] == "lmg_sub" and g["mode"] == "choices"
    tag = _parse(tmp_path, "lmg_tag")
    assert [s.task for s in tag.sources] == ["lmg_a", "lmg_b", "lmg_c"]
    assert tag.lm_eval_groups[0]["tree"]["kind"] == "tag"
    # a task is not touched
    assert [s.name for s in _parse(tmp_path, "lmg_a").sources] == ["g"]


def test_reading_the_spec_again_builds_no_index(tmp_path: Path, fresh_index: None,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """What a source's task is (a plain task, a group and its members) is remembered on disk by
    the index's fingerprint: a second process reading the spec (a cached rerun) builds no
    TaskManager; a group YAML that changes is read from the index again."""
    import lm_eval.tasks

    from assay.sources import lm_eval_index

    monkeypatch.setenv("ASSAY_CACHE_DIR", str(tmp_path / "cache"))
    built: list[object] = []
    real = lm_eval.tasks.TaskManager

    def counting(*a: Any, **kw: Any) -> Any:
        built.append(kw.get("include_path"))
        return real(*a, **kw)

    monkeypatch.setattr(lm_eval.tasks, "TaskManager", counting)
    _tasks(tmp_path, data=False)
    assert [s.task for s in _parse(tmp_path, "lmg_sized").sources] == ["lmg_a", "lmg_b", "lmg_c"]
    assert [s.name for s in _parse(tmp_path, "lmg_a").sources] == ["g"]
    assert len(built) == 1
    lm_eval_index.forget()  # as a new process: nothing in memory
    again = _parse(tmp_path, "lmg_sized")
    assert [s.task for s in again.sources] == ["lmg_a", "lmg_b", "lmg_c"]
    assert again.lm_eval_groups[0]["tree"]["aggregate"][0]["metric"] == "acc"
    assert [s.name for s in _parse(tmp_path, "lmg_a").sources] == ["g"]
    assert len(built) == 1  # both answers came from the records, not from an index
    # the group loses a member: its YAML's size changes, so its fingerprint does
    g = dict(GROUPS["lmg_sized"], task=["lmg_a", "lmg_c"])
    (tmp_path / "tasks" / "lmg_sized.yaml").write_text(yaml.safe_dump(g))
    lm_eval_index.forget()
    assert [s.task for s in _parse(tmp_path, "lmg_sized").sources] == ["lmg_a", "lmg_c"]
    assert len(built) == 2


def test_members_refused_before_any_data_loads(tmp_path: Path, fresh_index: None) -> None:
    """Every refused member is named with its reason, at parse, though no data exists."""
    from assay.errors import SpecError

    tasks = _tasks(tmp_path, data=False)
    (tasks / "lmg_mcc.yaml").write_text(
        TASK.format(name="lmg_mcc", data=tmp_path / "none.jsonl")
        .replace("[{metric: acc}, {metric: acc_norm}]", "[{metric: brier_score}]"))
    (tasks / "lmg_gen.yaml").write_text(
        TASK.format(name="lmg_gen", data=tmp_path / "none.jsonl")
        .replace("multiple_choice", "generate_until"))
    (tasks / "lmg_bad.yaml").write_text(yaml.safe_dump(
        {"group": "lmg_bad", "task": ["lmg_a", "lmg_mcc", "lmg_gen"]}))
    with pytest.raises(SpecError) as e:
        _parse(tmp_path, "lmg_bad")
    msg = str(e.value)
    assert "2 problems" in msg, msg
    assert "source 'g' (lm-eval group 'lmg_bad'), member 'lmg_mcc': " in msg
    assert "asks for 'brier_score'" in msg
    assert "member 'lmg_gen': the task's output_type is 'generate_until'" in msg
    assert "none.jsonl" not in msg and "lmg_a'" not in msg


def test_group_aggregation_other_than_mean_refused_as_lm_eval_does(
        tmp_path: Path, fresh_index: None) -> None:
    """lm-eval 0.4.13 refuses a group whose aggregate_metric_list names an aggregation other
    than mean (its AggMetricConfig raises when the group loads); assay refuses it at parse,
    naming the entry's field, instead of reporting a mean under another name."""
    from lm_eval.tasks import TaskManager

    from assay.errors import SpecError

    tasks = _tasks(tmp_path, data=False)
    (tasks / "lmg_median.yaml").write_text(yaml.safe_dump({
        "group": "lmg_median", "task": ["lmg_a", "lmg_b"],
        "aggregate_metric_list": [{"metric": "acc"},
                                  {"metric": "acc_norm", "aggregation": "median"}]}))
    with pytest.raises(ValueError, match="only pre-defined aggregation"):  # lm-eval's own
        TaskManager(include_path=str(tasks), include_defaults=False).load(["lmg_median"])
    with pytest.raises(SpecError) as e:
        _parse(tmp_path, "lmg_median")
    assert "aggregate_metric_list[1].aggregation: 'median'" in str(e.value)
    assert "lm-eval group 'lmg_median'" in str(e.value)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The tasks, the tiny model and lm-eval's runs of the two groups (simple_evaluate with
    its default bootstrap_iters: mean's stderr is lm-eval's closed form)."""
    import os

    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from helpers.tiny_bpe import build_tiny_bpe_lm
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    base = tmp_path_factory.mktemp("lmg")
    tasks = _tasks(base)
    model = build_tiny_bpe_lm(base / "my-model")
    lm = HFLM(pretrained=str(model), dtype="float32", batch_size=8, device="cpu",
              max_length=WINDOW)
    res = {}
    # one group a run: lm-eval refuses a task twice. f1/mcc's stderr is lm-eval's bootstrap:
    # 1000 draws, which assay replays (lm_eval_bootstrap.LM_EVAL_DRAWS); a mean's is closed form
    for group, iters in (("lmg_sized", 100000), ("lmg_plain", 100000), ("lmg_f1", 1000)):
        res[group] = simple_evaluate(
            model=lm, tasks=[group], task_manager=TaskManager(include_path=str(tasks),
                                                              include_defaults=False),
            fewshot_random_seed=1234, bootstrap_iters=iters)["results"]
    return {"base": base, "model": model, "res": res}


def _measured(world: dict[str, Any], task: str, tmp_path: Path) -> dict[str, Any]:
    from assay.stages import load_doc, run_study
    from assay.store import Store

    model = {"kind": "hf", "path": str(world["model"]), "dtype": "float32",
             "max_length": WINDOW}
    spec = _parse(world["base"], task, {"choice_accuracy": {}}, model=model)
    run = run_study(spec, Store(tmp_path / "store"), progress=None)
    measured = next(x for x in run.results if x.stage == "measure")
    docs = load_doc(Store(tmp_path / "store"), measured, "measurements")
    return {"docs": docs, "groups": {d["group"]: d for d in docs
                                     if d["kind"] == "lm_eval_group"}}


def _value(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(e for e in doc["estimates"] if e["name"] == name)


@pytest.mark.slow  # the tiny model scored by both tools
def test_size_weighted_group_equals_simple_evaluate(world: dict[str, Any], tmp_path: Path) -> None:
    """acc and acc_norm of a weight_by_size group and their stderr equal lm-eval's; each
    member's acc equals lm-eval's for that task and stays measured as its own source."""
    from lm_eval.api.metrics import pooled_sample_stderr

    got = _measured(world, "lmg_sized", tmp_path)
    want = world["res"]["lmg_sized"]
    doc = got["groups"]["lmg_sized"]
    for metric in ("acc", "acc_norm"):
        e = _value(doc, f"{metric},none")
        assert e["value"] == pytest.approx(want["lmg_sized"][f"{metric},none"], abs=1e-12)
        assert e["n"] == sum(SIZES.values()) and e["low"] is not None
        i = [e["name"] for e in doc["estimates"] if "," in e["name"] and ":" not in e["name"]
             ].index(f"{metric},none")
        assert doc["data"]["stderr"][i] == pytest.approx(
            want["lmg_sized"][f"{metric}_stderr,none"], rel=1e-9)
    # lm-eval's pooled stderr is not the plain mean's: the test tells them apart
    assert want["lmg_sized"]["acc_stderr,none"] == pytest.approx(pooled_sample_stderr(
        [want[t]["acc_stderr,none"] for t in SIZES], list(SIZES.values())))
    for t in SIZES:
        assert _value(doc, f"{t}: acc,none")["value"] == pytest.approx(want[t]["acc,none"])
        acc = next(d for d in got["docs"] if d["label"] == f"choice_accuracy[g.{t}]")
        assert acc["estimates"][0]["value"] == pytest.approx(want[t]["acc,none"])


@pytest.mark.slow
def test_plain_mean_and_subgroup_equal_simple_evaluate(world: dict[str, Any],
                                                       tmp_path: Path) -> None:
    """weight_by_size false: the plain mean over the leaves and lm-eval's unweighted stderr,
    no interval; the size-weighted subgroup inside it has its own entry equal to lm-eval's."""
    got = _measured(world, "lmg_plain", tmp_path)
    want = world["res"]["lmg_plain"]
    for group in ("lmg_plain", "lmg_sub"):
        doc = got["groups"][group]
        e = _value(doc, "acc,none")
        assert e["value"] == pytest.approx(want[group]["acc,none"], abs=1e-12), group
        assert doc["data"]["stderr"][0] == pytest.approx(want[group]["acc_stderr,none"],
                                                         rel=1e-9), group
        assert (e["low"] is None) == (group == "lmg_plain")
    sized = sum(want[t]["acc,none"] * n for t, n in SIZES.items()) / sum(SIZES.values())
    assert want["lmg_plain"]["acc,none"] != pytest.approx(sized)  # the two means differ here


@pytest.mark.slow
def test_corpus_metric_group_equals_simple_evaluate(world: dict[str, Any],
                                                    tmp_path: Path) -> None:
    """A group over f1 (size-weighted) and mcc (plain mean), metrics lm-eval aggregates over a
    member's documents: the group's value is lm-eval's mean of the members' f1 / mcc and its
    stderr lm-eval's pooled / unweighted one of the members' bootstrap stderrs, as
    simple_evaluate gives them; acc beside them stays as it was."""
    from lm_eval.api.metrics import pooled_sample_stderr, unweighted_mean_stderr

    got = _measured(world, "lmg_f1", tmp_path)
    want = world["res"]["lmg_f1"]
    doc = got["groups"]["lmg_f1"]
    names = [e["name"] for e in doc["estimates"] if ": " not in e["name"]]
    assert names == ["f1,none", "mcc,none", "acc,none"], doc["report"]
    for i, key in enumerate(names):
        metric = key.split(",")[0]
        e = _value(doc, key)
        assert e["value"] == pytest.approx(want["lmg_f1"][key], abs=1e-12), key
        assert doc["data"]["stderr"][i] == pytest.approx(
            want["lmg_f1"][f"{metric}_stderr,none"], rel=1e-9), key
        assert e["n"] == sum(F1_SIZES.values())
        for t in F1_SIZES:  # each member's own value is lm-eval's for that task
            assert _value(doc, f"{t}: {key}")["value"] == pytest.approx(want[t][key],
                                                                        abs=1e-12), (t, key)
    # the figures tell the rules apart: members differ, so size-weighted is not the plain
    # mean, and the stderrs are the pooled / unweighted rule over the members' bootstraps
    f1s = [want[t]["f1,none"] for t in F1_SIZES]
    assert f1s[0] != pytest.approx(f1s[1]) and 0 < want["lmg_f1"]["f1,none"] < 1
    assert want["lmg_f1"]["f1,none"] != pytest.approx(sum(f1s) / 2)
    assert want["lmg_f1"]["f1_stderr,none"] == pytest.approx(pooled_sample_stderr(
        [want[t]["f1_stderr,none"] for t in F1_SIZES], list(F1_SIZES.values())))
    assert want["lmg_f1"]["mcc_stderr,none"] == pytest.approx(unweighted_mean_stderr(
        [want[t]["mcc_stderr,none"] for t in F1_SIZES]))
    assert not [w for w in doc["data"].get("warnings", []) if "no member" in w]


@pytest.mark.slow
def test_group_without_aggregate_reports_members_only(world: dict[str, Any],
                                                      tmp_path: Path) -> None:
    doc = _measured(world, "lmg_none", tmp_path)["groups"]["lmg_none"]
    assert [e["name"] for e in doc["estimates"]] == [
        "lmg_a: acc,none", "lmg_a: acc_norm,none", "lmg_c: acc,none", "lmg_c: acc_norm,none"]
    assert "no aggregate_metric_list" in doc["report"] and "members only" in doc["report"]


@pytest.mark.slow  # lm-eval's whole index (13,000 YAMLs)
def test_shipped_mmlu_expands_to_its_57_subjects(tmp_path: Path) -> None:
    """lm-eval's own mmlu group: 57 member sources from the index, offline, no data read (the
    datasets are not in this machine's cache); its four subgroups kept in the tree."""
    import os

    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from assay.spec import parse_spec

    spec = parse_spec(yaml.safe_dump({"version": 1, "name": "x", "sources": [
        {"name": "mmlu", "kind": "lm_eval", "task": "mmlu",
         "choices": {"model": {"kind": "hf", "path": "m"}}}]}),
        source="x.yaml", base_dir=str(tmp_path))
    assert len(spec.sources) == 57
    assert all(s.task.startswith("mmlu_") and s.name == f"mmlu.{s.task}" for s in spec.sources)
    assert "mmlu.mmlu_anatomy" in {s.name for s in spec.sources}
    tree = spec.lm_eval_groups[0]["tree"]
    assert sorted(c["name"] for c in tree["children"]) == [
        "mmlu_humanities", "mmlu_other", "mmlu_social_sciences", "mmlu_stem"]
    assert tree["aggregate"] == [{"metric": "acc", "weight_by_size": True}]

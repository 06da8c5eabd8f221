"""docs/lm-eval.md's recipes and the few-shot samplers against lm-eval itself: one
``simple_evaluate`` run over task YAMLs on local copies shaped like MMLU, ARC, HellaSwag and
wikitext, whose logged contexts assay's rows must equal string for string."""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MMLU = ROOT / "configs" / "data" / "mmlu_tiny"
WINDOW = 48  # max_length of both tools: every 5-shot context and most pages are cut

MC = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files: {files}
output_type: multiple_choice
"""
MMLU_TASK = MC + """test_split: test
doc_to_text: "{{{{question.strip()}}}}\\nA. {{{{choices[0]}}}}\\nB. {{{{choices[1]}}}}\\n\\
  C. {{{{choices[2]}}}}\\nD. {{{{choices[3]}}}}\\nAnswer:"
doc_to_choice: ["A", "B", "C", "D"]
doc_to_target: answer
num_fewshot: {k}
metric_list:
  - {{metric: acc, aggregation: mean, higher_is_better: true}}
  - {{metric: acc_norm, aggregation: mean, higher_is_better: true}}
"""
TASKS = {
    # lm-eval's MMLU: first_n over the dev split, the subject's description
    "lmx_mmlu": MMLU_TASK + """fewshot_split: dev
fewshot_config: {{sampler: first_n}}
description: "The following are multiple choice questions (with answers) about \\
  {{{{ subject.replace('_', ' ') }}}}.\\n\\n"
""",
    "lmx_mmlu_default": MMLU_TASK + "fewshot_split: dev\n",  # the default sampler, another split
    "lmx_mmlu_self": MMLU_TASK + "fewshot_split: test\n",  # ... the evaluated split: no self
    "lmx_mmlu_self_first": MMLU_TASK + "fewshot_split: test\n"
                           "fewshot_config: {{sampler: first_n}}\n",
    "lmx_dups": MMLU_TASK + "fewshot_split: test\n",  # copies of a question are all dropped
    "lmx_arc": MC + """training_split: train
test_split: test
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{choices.label.index(answerKey)}}}}"
doc_to_choice: "{{{{choices.text}}}}"
num_fewshot: {k}
metric_list:
  - {{metric: acc}}
""",
    "lmx_hellaswag": MC + """training_split: train
validation_split: validation
test_split: null
process_docs: !function utils.process_docs
doc_to_text: "{{{{query}}}}"
doc_to_target: "{{{{label}}}}"
doc_to_choice: "choices"
num_fewshot: {k}
metric_list:
  - {{metric: acc}}
""",
    "lmx_wikitext": """task: {name}
dataset_path: json
dataset_kwargs:
  data_files: {files}
output_type: loglikelihood_rolling
test_split: test
doc_to_text: ""
doc_to_target: !function preprocess_wikitext.wikitext_detokenizer
process_results: !function preprocess_wikitext.process_results
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
""",
}


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    return path


def _words(rnd: random.Random, n: int) -> str:
    vocab = ("the water number way first people said time could été naïve café über "
             "do they one by as like from write hot").split()
    return " ".join(rnd.choice(vocab) for _ in range(n))


def _arc(rnd: random.Random, n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        m = 3 + i % 3
        labels = list("ABCDE"[:m]) if i % 4 else [str(j + 1) for j in range(m)]
        out.append({"id": f"arc-{i}", "question": _words(rnd, 6) + " — ¿" + _words(rnd, 2) + "?",
                    "choices": {"text": [_words(rnd, 1 + j % 3) for j in range(m)],
                                "label": labels},
                    "answerKey": labels[i % m]})
    return out


def _hellaswag(rnd: random.Random, n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        ctx_b = "" if i % 3 == 0 else _words(rnd, 3)
        label = "[header] How to " if i % 2 else ""
        out.append({"ind": i, "activity_label": label + _words(rnd, 2),
                    "ctx_a": _words(rnd, 5) + (" [title] " + _words(rnd, 2) if i % 2 else ""),
                    "ctx_b": ctx_b, "split": "val",
                    "endings": [(" [step] " if j == i % 4 else "") + _words(rnd, 4) +
                                ("  " + _words(rnd, 1) if j == 1 else "") for j in range(4)],
                    "label": str(i % 4)})
    return out


def _wikitext(rnd: random.Random, n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        body = (f" = = {_words(rnd, 2)} = = \n {_words(rnd, 4)} @-@ {_words(rnd, 1)} , "
                f"( {_words(rnd, 2)} ) 3 @.@ 5 {_words(rnd, 3)} 's \" {_words(rnd, 2)} \" . \n"
                f" {_words(rnd, 5 + 7 * i)} ; 12 @,@ 000 ° N {_words(rnd, 2)} ? \n")
        out.append({"page": body, "title": f"page {i}"})
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The data, the tiny model, and lm-eval's logged run over every task (one run)."""
    pytest.importorskip("lm_eval")
    import os

    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import lm_eval
    from helpers.tiny_bpe import build_tiny_bpe_lm
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    base = tmp_path_factory.mktemp("lmx")
    data = base / "data"
    rnd = random.Random(0)
    for split in ("test", "dev"):
        (data / "mmlu").mkdir(parents=True, exist_ok=True)
        shutil.copy(MMLU / f"{split}.jsonl", data / "mmlu" / f"{split}.jsonl")
    mmlu = [json.loads(x) for x in (MMLU / "test.jsonl").read_text().splitlines()]
    _write(data / "dups" / "test.jsonl", [mmlu[i % 2] for i in range(10)] + mmlu[2:4])
    _write(data / "arc" / "test.jsonl", _arc(rnd, 10))
    _write(data / "arc" / "train.jsonl", _arc(rnd, 7))
    _write(data / "hellaswag" / "validation.jsonl", _hellaswag(rnd, 9))
    _write(data / "hellaswag" / "train.jsonl", _hellaswag(rnd, 6))
    _write(data / "wikitext" / "test.jsonl", _wikitext(rnd, 4))
    model = build_tiny_bpe_lm(base / "my-model")

    # lm-eval's own preprocessing code, used as it ships (the oracle, not a copy in this repo)
    tasks = base / "tasks"
    tasks.mkdir()
    shipped = Path(lm_eval.__file__).parent / "tasks"
    shutil.copy(shipped / "hellaswag" / "utils.py", tasks / "utils.py")
    shutil.copy(shipped / "wikitext" / "preprocess_wikitext.py", tasks / "preprocess_wikitext.py")
    files = {"lmx_mmlu": "mmlu:test,dev", "lmx_mmlu_default": "mmlu:test,dev",
             "lmx_mmlu_self": "mmlu:test", "lmx_mmlu_self_first": "mmlu:test",
             "lmx_dups": "dups:test", "lmx_arc": "arc:test,train",
             "lmx_hellaswag": "hellaswag:validation,train", "lmx_wikitext": "wikitext:test"}
    shots = {"lmx_mmlu": 5, "lmx_mmlu_default": 3, "lmx_mmlu_self": 3, "lmx_mmlu_self_first": 2,
             "lmx_dups": 3, "lmx_arc": 2, "lmx_hellaswag": 2, "lmx_wikitext": 0}
    for name, text in TASKS.items():
        d, splits = files[name].split(":")
        fs = "{" + ", ".join(f"{s}: {data / d / (s + '.jsonl')}" for s in splits.split(",")) + "}"
        (tasks / f"{name}.yaml").write_text(text.format(name=name, files=fs, k=shots[name]))
    lm = HFLM(pretrained=str(model), dtype="float32", batch_size=8, device="cpu",
              max_length=WINDOW)
    res = simple_evaluate(model=lm, tasks=list(TASKS), log_samples=True, bootstrap_iters=0,
                          task_manager=TaskManager(include_path=str(tasks),
                                                   include_defaults=False),
                          fewshot_random_seed=1234)
    return {"base": base, "res": res, "model": model}


def _recipes() -> dict[str, dict[str, Any]]:
    text = (ROOT / "docs" / "lm-eval.md").read_text()
    out = {}
    for name, block in re.findall(r"```yaml\n# recipe: (\w+)\n(.*?)```", text, re.S):
        out[name] = yaml.safe_load(block)[0]
    return out


def _spec(world: dict[str, Any], source: dict[str, Any], measure: str = "") -> Any:
    from assay.spec import parse_spec

    doc = {"version": 1, "name": "lmx", "sources": [source]}
    text = yaml.safe_dump(doc, allow_unicode=True) + measure
    return parse_spec(text, source="lmx.yaml", base_dir=str(world["base"]))


def _rows(world: dict[str, Any], source: dict[str, Any]) -> list[dict[str, Any]]:
    spec = _spec(world, source)
    return list(spec.sources[0].build(spec.paths)[0])


def _samples(world: dict[str, Any], task: str) -> list[dict[str, Any]]:
    return sorted(world["res"]["samples"][task], key=lambda s: s["doc_id"])


def _assert_contexts(rows: list[dict[str, Any]], samples: list[dict[str, Any]],
                     delim: str = " ") -> None:
    """Every context and every continuation equal, string for string."""
    assert len(rows) == len(samples)
    for r, s in zip(rows, samples):
        assert r["prompt"] == s["arguments"][0][0], f"doc {s['doc_id']}"
        choices = r["privileged"]["choices"]
        assert [delim + c for c in choices] == [a[1] for a in s["arguments"]]


def _mmlu_variant(world: dict[str, Any], **fewshot: Any) -> dict[str, Any]:
    src = json.loads(json.dumps(_recipes()["mmlu"]))
    src["choices"]["description"] = ""
    src["choices"]["fewshot"] = fewshot
    src["choices"]["model"]["path"] = str(world["model"])
    return src


@pytest.mark.slow  # lm-eval's import and its task pipeline
def test_mmlu_recipe_first_n_and_scores(world: dict[str, Any]) -> None:
    """docs' MMLU recipe: lm-eval's first_n contexts with the description rendered per record;
    scored with max_length, each choice's log-likelihood and acc equal lm-eval's."""
    from assay.stages.score_choices import score_choice_rows

    src = _recipes()["mmlu"]
    src["choices"]["model"] = {**src["choices"]["model"], "path": str(world["model"]),
                               "max_length": WINDOW}
    rows = _rows(world, src)
    samples = _samples(world, "lmx_mmlu")
    _assert_contexts(rows, samples)
    subjects = {r["prompt"].split(" about ", 1)[1].split(".\n\n", 1)[0] for r in rows}
    assert subjects == {"water science", "number theory", "people studies"}  # per record
    spec = _spec(world, src)
    scored = list(score_choice_rows(spec.sources[0].build(spec.paths)[0],
                                    spec.sources[0].choices.model))
    for r, s in zip(scored, samples):
        np.testing.assert_allclose(r["judge_meta"]["loglik"],
                                   [x[0] for x in s["filtered_resps"]], atol=1e-4, rtol=0)
        assert r["reward"] == s["acc"]
    # the window matters: every 5-shot context is longer than it, so without it the numbers move
    whole = {**src["choices"]["model"]}
    whole.pop("max_length")
    spec2 = _spec(world, {**src, "choices": {**src["choices"], "model": whole}})
    unwindowed = list(score_choice_rows(spec2.sources[0].build(spec2.paths)[0], whole))
    assert max(abs(a - b) for r, u in zip(scored, unwindowed)
               for a, b in zip(r["judge_meta"]["loglik"], u["judge_meta"]["loglik"])) > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize(("task", "fewshot"), [
    ("lmx_mmlu_default", {"k": 3, "path": "data/mmlu/dev.jsonl", "sampler": "lm_eval"}),
    ("lmx_mmlu_self", {"k": 3, "sampler": "lm_eval"}),
    ("lmx_mmlu_self_first", {"k": 2, "sampler": "first_n"}),
])
def test_samplers_equal_lm_eval(world: dict[str, Any], task: str, fewshot: dict) -> None:
    """lm-eval's default sampler (another split; the evaluated split, the question excluded)
    and first_n over the evaluated split: the same examples in the same order; assay's seeded
    draw is not lm-eval's."""
    rows = _rows(world, _mmlu_variant(world, **fewshot))
    _assert_contexts(rows, _samples(world, task))
    seeded = _rows(world, _mmlu_variant(world, **{**fewshot, "sampler": "seeded"}))
    assert sum(a["prompt"] != b["prompt"] for a, b in zip(rows, seeded)) > len(rows) // 2


@pytest.mark.slow
def test_sampler_drops_every_copy_of_the_question(world: dict[str, Any]) -> None:
    """A split holding copies of a question: lm-eval drops them all (by content), redrawing
    when they took the spare; so does assay."""
    src = _mmlu_variant(world, k=3, sampler="lm_eval")
    src["path"] = "data/dups/test.jsonl"
    rows = _rows(world, src)
    _assert_contexts(rows, _samples(world, "lmx_dups"))
    for r in rows:  # no question is its own example
        q = r["prompt"].rsplit("\n\n", 1)[1]
        shots = [s.rsplit(" ", 1)[0] for s in r["prompt"].split("\n\n")[:-1]]
        assert q not in shots


@pytest.mark.slow
def test_arc_recipe(world: dict[str, Any]) -> None:
    """docs' ARC recipe: labels (letters and digits), non-ASCII text, training-split examples."""
    src = _recipes()["arc"]
    src["choices"]["model"]["path"] = str(world["model"])
    _assert_contexts(_rows(world, src), _samples(world, "lmx_arc"))


@pytest.mark.slow
def test_hellaswag_recipe(world: dict[str, Any]) -> None:
    """docs' HellaSwag recipe: lm-eval's process_docs (markers, strip, double spaces, an empty
    ctx_b) as templates, in the questions, the choices and the examples."""
    src = _recipes()["hellaswag"]
    src["choices"]["model"]["path"] = str(world["model"])
    rows = _rows(world, src)
    _assert_contexts(rows, _samples(world, "lmx_hellaswag"))
    raw = [json.loads(x) for x in
           (world["base"] / "data/hellaswag/validation.jsonl").read_text().splitlines()]
    empty = [i for i, r in enumerate(raw) if r["ctx_b"] == ""]
    assert empty and all(not rows[i]["prompt"][-1].isspace() for i in empty)
    assert all("[" not in r["prompt"] for r in rows)  # markers gone, examples included


@pytest.mark.slow
def test_wikitext_recipe(world: dict[str, Any], tmp_path: Path) -> None:
    """docs' wikitext recipe: the detokenizer as a template, words and bytes of the raw page;
    scored in windows of max_length, the three perplexities equal lm-eval's (1e-4 relative)."""
    from assay.stages import load_doc, run_study
    from assay.store import Store

    src = _recipes()["wikitext"]
    src["perplexity"]["model"] = {**src["perplexity"]["model"], "path": str(world["model"]),
                                  "max_length": WINDOW}
    samples = _samples(world, "lmx_wikitext")
    rows = _rows(world, src)
    assert [r["prompt"] for r in rows] == [s["arguments"][0][0] for s in samples]
    assert all(r["prompt"] != s["doc"]["page"] for r, s in zip(rows, samples))
    spec = _spec(world, src, "measure:\n  perplexity: {}\n")
    run = run_study(spec, Store(tmp_path / "store"), progress=None)
    measured = next(x for x in run.results if x.stage == "measure")
    doc = next(d for d in load_doc(Store(tmp_path / "store"), measured, "measurements")
               if d["kind"] == "perplexity")
    got = {e["name"]: e["value"] for e in doc["estimates"]}
    want = world["res"]["results"]["lmx_wikitext"]
    for name in ("word_perplexity", "byte_perplexity", "bits_per_byte"):
        assert got[name] == pytest.approx(want[f"{name},none"], rel=1e-4), name


@pytest.mark.slow
def test_lm_eval_source_equals_simple_evaluate(world: dict[str, Any], tmp_path: Path) -> None:
    """kind: lm_eval over the same task YAMLs (include_path; !function process_docs; first_n
    and the default sampler; a rolling task counting the raw page), scored by assay's hf
    backend in a study: every context, per-request log-likelihood, acc and acc_norm, and the
    three perplexities equal simple_evaluate's."""
    from assay.spec import parse_spec
    from assay.stages import concat_rows, load_doc, run_study
    from assay.store import Store

    model = {"kind": "hf", "path": str(world["model"]), "dtype": "float32", "max_length": WINDOW}
    inc = str(world["base"] / "tasks")
    mc = {"mmlu": "lmx_mmlu", "mmlu_self": "lmx_mmlu_self", "hellaswag": "lmx_hellaswag"}
    sources = [{"name": n, "kind": "lm_eval", "task": t, "include_path": inc,
                "choices": {"model": model}} for n, t in mc.items()]
    sources.append({"name": "wikitext", "kind": "lm_eval", "task": "lmx_wikitext",
                    "include_path": inc, "perplexity": {"model": model}})
    spec = parse_spec(yaml.safe_dump({"version": 1, "name": "lmx", "sources": sources,
                                      "measure": {"choice_accuracy": {}, "perplexity": {}}}),
                      source="lmx.yaml", base_dir=str(tmp_path))
    store = Store(tmp_path / "store")
    run = run_study(spec, store, progress=None)
    res = world["res"]
    for name, task in mc.items():
        rows = sorted(concat_rows(store, run.graded[name]), key=lambda r: int(r["task_id"]))
        samples = _samples(world, task)
        assert len(rows) == len(samples)
        for r, s in zip(rows, samples):
            assert r["prompt"] == s["arguments"][0][0]
            np.testing.assert_allclose(r["judge_meta"]["loglik"],
                                       [x[0] for x in s["filtered_resps"]], atol=1e-4, rtol=0)
            assert r["reward"] == s["acc"]
            if "acc_norm" in s:
                assert r["markers"]["acc_norm"] == s["acc_norm"]
        assert np.mean([r["reward"] for r in rows]) == pytest.approx(
            res["results"][task]["acc,none"], abs=1e-12)
    measured = next(x for x in run.results if x.stage == "measure")
    doc = next(d for d in load_doc(store, measured, "measurements") if d["kind"] == "perplexity")
    got = {e["name"]: e["value"] for e in doc["estimates"]}
    for name in ("word_perplexity", "byte_perplexity", "bits_per_byte"):
        assert got[name] == pytest.approx(res["results"]["lmx_wikitext"][f"{name},none"],
                                          rel=1e-4), name


def test_lm_eval_source_refuses_what_it_cannot_score(tmp_path: Path) -> None:
    """A generate_until task, a mode that does not fit the task, and an unknown task are
    errors naming the source and what to do; no lm-eval run is needed."""
    pytest.importorskip("lm_eval")
    from assay.errors import SpecError
    from assay.spec import parse_spec

    (tmp_path / "d.jsonl").write_text('{"q": "1+1?", "a": "2"}\n')
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "gen.yaml").write_text(f"""task: lmx_gen
dataset_path: json
dataset_kwargs: {{data_files: {{test: {tmp_path / "d.jsonl"}}}}}
test_split: test
output_type: generate_until
doc_to_text: "{{{{q}}}}"
doc_to_target: "{{{{a}}}}"
metric_list: [{{metric: exact_match}}]
""")

    def source(task: str, mode: str = "choices"):
        spec = parse_spec(yaml.safe_dump({"version": 1, "name": "x", "sources": [
            {"name": "s", "kind": "lm_eval", "task": task, "include_path": "tasks",
             mode: {"model": {"kind": "hf", "path": "m"}}}]}),
            source="x.yaml", base_dir=str(tmp_path))
        return spec.sources[0], spec.paths

    src, paths = source("lmx_gen")
    with pytest.raises(SpecError, match="output_type is 'generate_until'.*give generate: "):
        src.build(paths)
    spec = parse_spec(yaml.safe_dump({"version": 1, "name": "x", "sources": [
        {"name": "s", "kind": "lm_eval", "task": "lmx_gen", "include_path": "tasks/gen.yaml",
         "choices": {"model": {"kind": "hf", "path": "m"}}}]}),
        source="x.yaml", base_dir=str(tmp_path))
    with pytest.raises(SpecError, match="output_type is 'generate_until'"):  # a YAML's path
        spec.sources[0].build(spec.paths)
    src, paths = source("lmx_gen", "perplexity")
    with pytest.raises(SpecError, match="not 'loglikelihood_rolling'"):
        src.build(paths)
    src, paths = source("no_such_task")
    with pytest.raises(SpecError, match="source 's' .*could not load the task"):
        src.build(paths)
    assert src.check(paths)[0][0].startswith("task: source 's'")
    with pytest.raises(Exception, match="give choices"):
        parse_spec("{name: x, sources: [{name: s, kind: lm_eval, task: t}]}")
    from assay.hashing import file_checksum

    ident = source("lmx_gen")[0].identity(paths)
    assert ["gen.yaml", file_checksum(tmp_path / "tasks" / "gen.yaml")] in ident["files"]
    assert ["(data)", file_checksum(tmp_path / "d.jsonl")] in ident["files"]  # keys the rows


@pytest.mark.slow
def test_lm_eval_source_limit_and_num_fewshot(world: dict[str, Any]) -> None:
    """limit keeps lm-eval's first documents with their contexts; num_fewshot overrides the
    YAML's, and the contexts lm-eval then builds equal a choices: source's with the lm_eval
    sampler at that k (two implementations of one draw)."""
    inc = str(world["base"] / "tasks")
    base = {"name": "s", "kind": "lm_eval", "include_path": inc,
            "choices": {"model": {"kind": "hf", "path": str(world["model"])}}}
    rows = _rows(world, {**base, "task": "lmx_mmlu_default", "limit": 5})
    assert [r["prompt"] for r in rows] == \
        [s["arguments"][0][0] for s in _samples(world, "lmx_mmlu_default")[:5]]
    one = _rows(world, {**base, "task": "lmx_mmlu_default", "num_fewshot": 1})
    ours = _rows(world, _mmlu_variant(world, k=1, path="data/mmlu/dev.jsonl", sampler="lm_eval"))
    assert [r["prompt"] for r in one] == [r["prompt"] for r in ours]
    assert all(r["prompt"].count("\n\n") == 1 for r in one)
    assert one[0]["meta"]["subject"] == "water_science"  # by: reads the documents' fields

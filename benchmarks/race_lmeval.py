"""Benchmark: small lm-eval jobs, `assay run` against lm-eval's CLI, both from a cold start on
the same tiny local model; medians of alternated repeats.

Run: ``.venv/bin/python benchmarks/race_lmeval.py [--scenario mc_ppl|gsm8k|several]
[--repeats 3] [--questions 36] [--docs 24] [--gsm 24]`` (lm-eval is in the ``dev`` extra).

Scenarios: ``mc_ppl`` (the default, below); ``gsm8k``: one ``generate_until`` task, lm-eval's
shipped gsm8k YAML over ``--gsm`` local gsm8k-shaped documents (2-shot, ``max_gen_toks`` 64,
greedy), assay as ``kind: lm_eval`` with a ``kind: hf`` generate model; ``several``: gsm8k, the
MC task and the perplexity task in one spec, all three as ``kind: lm_eval`` sources over the same
YAMLs, against ``lm_eval --tasks gsm8k,mc_tiny,ppl_tiny``. The tiny model's gsm8k answers are
noise, so besides both exact_match means the race checks every document's response text is the
same on both sides (lm-eval's ``--log_samples`` against assay's completions).

The job: the shipped MMLU-shaped questions (configs/data/mmlu_tiny, repeated to ``--questions``
with a number so each context differs), zero-shot, " A" .. " D" scored after lm-eval's MMLU
prompt; and ``--docs`` documents scored whole in rolling windows (word and byte perplexity, bits
per byte). The model: the tests' tiny byte-level BPE Llama (tests/helpers/tiny_bpe.py), fp32 on
the CPU. Each side runs as a fresh process per repeat:

- assay: ``assay run SPEC --no-view`` in a warm folder (its Prefect database exists: a first,
  untimed run made it) with a fresh store, so every choice and window is scored;
- lm-eval: ``lm_eval --model hf --tasks mc_tiny,ppl_tiny --include_path DIR`` on task YAMLs
  over the same JSONL files (``dataset_path: json``), ``batch_size 16``, no cache.

Checks that both sides report the same numbers (acc, word perplexity within 1e-4 relative;
gsm8k's two exact_match means exactly, and its responses) before printing the walls and the
ratio lm-eval / assay, and each side's CPU seconds (user + system of the process tree it waited
for): on a shared box the CPU time is the steadier number, the wall the one the goal names.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))
BIN = Path(sys.executable).parent

TEMPLATE = ("{{ question.strip() }}\nA. {{ choices[0] }}\nB. {{ choices[1] }}\n"
            "C. {{ choices[2] }}\nD. {{ choices[3] }}\nAnswer:")


def write_data(work: Path, n_questions: int, n_docs: int) -> None:
    from loglik import write_questions

    test = write_questions(work / "test.jsonl", n_questions)
    words = " ".join(r["question"] + " " + " ".join(r["choices"]) for r in test).split()
    with open(work / "docs.jsonl", "w") as f:
        for d in range(n_docs):
            n = 60 + 37 * d % 400  # 60-460 words: one to a few windows each
            text = " ".join(words[(d * 13 + j) % len(words)] for j in range(n))
            f.write(json.dumps({"id": f"d{d}", "text": text}) + "\n")


GSM_SHOTS = 2
GSM_MAX_GEN = 64
GSM_STOP = ["Question:", "</s>", "<|im_end|>"]


def write_gsm(work: Path, n: int) -> None:
    """gsm8k-shaped documents (a question, a worked answer ending in '#### N') for the shipped
    YAML's train (few-shot) and test splits."""
    for split, (count, start) in {"train": (4, 1000), "test": (n, 0)}.items():
        with open(work / f"gsm_{split}.jsonl", "w") as f:
            for i in range(start, start + count):
                a, b = 3 + i % 17, 5 + 7 * i % 23
                f.write(json.dumps({
                    "question": f"Sam has {a} pens and buys {b} more. How many pens? ({i})",
                    "answer": f"He has {a} + {b} = {a + b} pens.\n#### {a + b}"}) + "\n")


def gsm_source(model: Path) -> str:
    return f"""  - name: gsm
    kind: lm_eval
    task: gsm8k
    include_path: tasks
    num_fewshot: {GSM_SHOTS}
    gen_kwargs: {{max_gen_toks: {GSM_MAX_GEN}}}
    generate:
      model: {{kind: hf, path: {model}, dtype: float32}}
      api: completions
      params: {{temperature: 0.0, top_p: 1.0, max_tokens: {GSM_MAX_GEN},
               stop: {json.dumps(GSM_STOP)}}}
"""


def write_assay_spec(work: Path, model: Path, scenario: str) -> Path:
    spec = work / f"{scenario}.yaml"
    if scenario == "gsm8k":
        spec.write_text(f"version: 1\nname: race\nsources:\n{gsm_source(model)}")
        return spec
    if scenario == "several":
        spec.write_text(f"""version: 1
name: race
sources:
{gsm_source(model)}  - name: mc
    kind: lm_eval
    task: mc_tiny
    include_path: tasks
    choices: {{model: {{kind: hf, path: {model}, dtype: float32}}}}
  - name: ppl
    kind: lm_eval
    task: ppl_tiny
    include_path: tasks
    perplexity: {{model: {{kind: hf, path: {model}, dtype: float32}}}}
measure:
  choice_accuracy: {{}}
  perplexity: {{}}
""")
        return spec
    return write_mc_ppl_spec(work, model)


def write_mc_ppl_spec(work: Path, model: Path) -> Path:
    spec = work / "study.yaml"
    spec.write_text(f"""version: 1
name: race
sources:
  - name: mc
    kind: file
    path: test.jsonl
    prompt_template: {json.dumps(TEMPLATE)}
    choices:
      model: {{kind: hf, path: {model}, dtype: float32}}
      templates: ["A", "B", "C", "D"]
      answer: answer
      target_delimiter: " "
  - name: ppl
    kind: file
    path: docs.jsonl
    fields: {{task_id: id}}
    perplexity: {{model: {{kind: hf, path: {model}, dtype: float32}}, field: text}}
measure:
  choice_accuracy: {{}}
  perplexity: {{}}
""")
    return spec


def write_lmeval_tasks(work: Path) -> Path:
    tasks = work / "tasks"
    tasks.mkdir(exist_ok=True)
    (tasks / "mc_tiny.yaml").write_text(f"""task: mc_tiny
dataset_path: json
dataset_kwargs: {{data_files: {{test: {work / 'test.jsonl'}}}}}
test_split: test
output_type: multiple_choice
doc_to_text: {json.dumps(TEMPLATE)}
doc_to_choice: ["A", "B", "C", "D"]
doc_to_target: answer
target_delimiter: " "
metric_list:
  - {{metric: acc, aggregation: mean, higher_is_better: true}}
""")
    (tasks / "ppl_tiny.yaml").write_text(f"""task: ppl_tiny
dataset_path: json
dataset_kwargs: {{data_files: {{test: {work / 'docs.jsonl'}}}}}
test_split: test
output_type: loglikelihood_rolling
doc_to_text: "{{{{text}}}}"
doc_to_target: "{{{{text}}}}"
metric_list:
  - {{metric: word_perplexity}}
  - {{metric: byte_perplexity}}
  - {{metric: bits_per_byte}}
""")
    import lm_eval
    import yaml

    # lm-eval's own gsm8k definition, only its dataset pointed at the local files
    cfg = yaml.safe_load((Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml")
                         .read_text())
    cfg.pop("tag", None)
    cfg.pop("dataset_name", None)
    cfg.update(dataset_path="json", dataset_kwargs={"data_files": {
        s: str(work / f"gsm_{s}.jsonl") for s in ("train", "test")}})
    (tasks / "gsm8k.yaml").write_text(yaml.safe_dump(cfg))
    return tasks


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    e.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return e


TASKS = {"mc_ppl": ["mc_tiny", "ppl_tiny"], "gsm8k": ["gsm8k"],
         "several": ["gsm8k", "mc_tiny", "ppl_tiny"]}


def timed(cmd: list[str], cwd: Path, env: dict[str, str]
          ) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Run ``cmd``; its wall seconds and its CPU seconds (user + system of the process and the
    children it waited for): on a shared box the CPU time is the steadier of the two."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1200)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return p, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run_assay(work: Path, spec: Path, store: Path) -> tuple[float, float, dict[str, Any]]:
    out = work / f"out-{store.name}"
    p, wall, cpu = timed([str(BIN / "assay"), "run", str(spec), "--output", str(out),
                          "--no-view"], work, {**env(), "ASSAY_STORE": str(store)})
    if p.returncode != 0:
        raise SystemExit(f"assay run failed ({p.returncode}):\n{p.stderr[-3000:]}")
    report = json.loads((out / "report.json").read_text())
    got: dict[str, Any] = {}
    for doc in report["measurements"]:
        est = {e["name"]: e["value"] for e in doc.get("estimates", [])}
        if doc["kind"] == "choice_accuracy":
            got["acc"] = est["acc"]
        elif doc["kind"] == "perplexity":
            got["word_perplexity"] = est["word_perplexity"]
        elif doc["kind"] == "lm_eval_metrics":
            got.update({k: v for k, v in est.items() if k.startswith("exact_match")})
    if "exact_match,strict-match" in got:  # after the clock: the responses, from the store
        got["responses"] = assay_responses(out)
    return wall, cpu, got


def assay_responses(out: Path) -> dict[int, str]:
    """Each gsm8k document's completion text, from the run's rows file."""
    import pyarrow.parquet as pq

    rows = pq.read_table(out / "rows" / "gsm.parquet", columns=["task_id", "final_text"])
    return {int(t): str(x) for t, x in zip(rows["task_id"].to_pylist(),
                                            rows["final_text"].to_pylist())}


def run_lmeval(work: Path, tasks: Path, model: Path, i: int,
               names: list[str]) -> tuple[float, float, dict[str, Any]]:
    out = work / f"lm-{i}"
    p, wall, cpu = timed([str(BIN / "lm_eval"), "--model", "hf", "--model_args",
                          f"pretrained={model},dtype=float32", "--tasks", ",".join(names),
                          "--include_path", str(tasks), "--batch_size", "16", "--device", "cpu",
                          "--output_path", str(out)]
                         + (["--log_samples", "--num_fewshot", str(GSM_SHOTS), "--gen_kwargs",
                             f"max_gen_toks={GSM_MAX_GEN}"] if "gsm8k" in names else []),
                         work, env())
    if p.returncode != 0:
        raise SystemExit(f"lm_eval failed ({p.returncode}):\n{p.stderr[-3000:]}")
    res = json.loads(next(out.rglob("results*.json")).read_text())["results"]
    got: dict[str, Any] = {}
    if "mc_tiny" in res:
        got["acc"] = float(res["mc_tiny"]["acc,none"])
    if "ppl_tiny" in res:
        got["word_perplexity"] = float(res["ppl_tiny"]["word_perplexity,none"])
    if "gsm8k" in res:
        for k in ("exact_match,strict-match", "exact_match,flexible-extract"):
            got[k] = float(res["gsm8k"][k])
        samples = [json.loads(x) for x in next(out.rglob("samples_gsm8k_*.jsonl"))
                   .read_text().splitlines()]
        got["responses"] = {s["doc_id"]: s["resps"][0][0] for s in samples}
    return wall, cpu, got


def check_equal(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    if sorted(ours) != sorted(theirs):
        raise SystemExit(f"different numbers: assay {sorted(ours)} vs lm-eval {sorted(theirs)}")
    for k, b in theirs.items():
        a = ours[k]
        if k == "responses":
            bad = [d for d in b if a.get(d) != b[d]]
            if bad or len(a) != len(b):
                raise SystemExit(f"gsm8k responses differ on documents {bad[:5]} "
                                 f"({len(a)} vs {len(b)})")
        elif k.startswith("exact_match") and a != b:
            raise SystemExit(f"{k} differs: assay {a} vs lm-eval {b}")
        elif abs(a - b) > 1e-4 * max(1.0, abs(b)):
            raise SystemExit(f"{k} differs: assay {a} vs lm-eval {b}")


def shown(got: dict[str, Any]) -> dict[str, Any]:
    return {k: (f"{len(v)} texts" if k == "responses" else round(v, 4)) for k, v in got.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", choices=sorted(TASKS), default="mc_ppl")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--questions", type=int, default=36)
    ap.add_argument("--docs", type=int, default=24)
    ap.add_argument("--gsm", type=int, default=24, help="gsm8k test documents")
    args = ap.parse_args()
    from helpers.tiny_bpe import build_tiny_bpe_lm

    work = Path(tempfile.mkdtemp(prefix="race-lmeval-"))
    model = build_tiny_bpe_lm(work / "model", hidden=64, layers=2)
    write_data(work, args.questions, args.docs)
    write_gsm(work, args.gsm)
    spec = write_assay_spec(work, model, args.scenario)
    tasks = write_lmeval_tasks(work)
    names = TASKS[args.scenario]
    # untimed, once each: the folder's Prefect database; both sides' datasets caches
    run_assay(work, spec, work / "store-warmup")
    run_lmeval(work, tasks, model, -1, names)
    walls: dict[str, list[float]] = {"assay": [], "lm-eval": []}
    cpus: dict[str, list[float]] = {"assay": [], "lm-eval": []}
    for r in range(args.repeats):
        sides = ["assay", "lm-eval"] if r % 2 == 0 else ["lm-eval", "assay"]
        for side in sides:
            if side == "assay":
                wall, cpu, got = run_assay(work, spec, work / f"store-{r}")
                ours = got
            else:
                wall, cpu, got = run_lmeval(work, tasks, model, r, names)
                theirs = got
            walls[side].append(wall)
            cpus[side].append(cpu)
            print(f"repeat {r + 1} {side:8s} {wall:6.2f} s wall {cpu:6.2f} s cpu  {shown(got)}",
                  flush=True)
        check_equal(ours, theirs)
    ma, ml = statistics.median(walls["assay"]), statistics.median(walls["lm-eval"])
    print(f"{args.scenario}: median wall: assay {ma:.2f} s "
          f"({min(walls['assay']):.2f}-{max(walls['assay']):.2f}), lm-eval {ml:.2f} s "
          f"({min(walls['lm-eval']):.2f}-{max(walls['lm-eval']):.2f}); "
          f"lm-eval / assay = {ml / ma:.2f}x")
    ca, cl = statistics.median(cpus["assay"]), statistics.median(cpus["lm-eval"])
    print(f"{args.scenario}: median cpu: assay {ca:.2f} s, lm-eval {cl:.2f} s; "
          f"lm-eval / assay = {cl / ca:.2f}x")


if __name__ == "__main__":
    main()

"""Benchmark: a small multiple-choice + perplexity job, `assay run` against lm-eval's CLI, both
from a cold start on the same tiny local model; medians of alternated repeats.

Run: ``.venv/bin/python benchmarks/race_lmeval.py [--repeats 3] [--questions 36] [--docs 24]``
(lm-eval is in the ``dev`` extra).

The job: the shipped MMLU-shaped questions (configs/data/mmlu_tiny, repeated to ``--questions``
with a number so each context differs), zero-shot, " A" .. " D" scored after lm-eval's MMLU
prompt; and ``--docs`` documents scored whole in rolling windows (word and byte perplexity, bits
per byte). The model: the tests' tiny byte-level BPE Llama (tests/helpers/tiny_bpe.py), fp32 on
the CPU. Each side runs as a fresh process per repeat:

- assay: ``assay run SPEC --no-view`` in a warm folder (its Prefect database exists: a first,
  untimed run made it) with a fresh store, so every choice and window is scored;
- lm-eval: ``lm_eval --model hf --tasks mc_tiny,ppl_tiny --include_path DIR`` on task YAMLs
  over the same JSONL files (``dataset_path: json``), ``batch_size 16``, no cache.

Checks that both sides report the same acc and the same word perplexity (within 1e-4
relative) before printing the walls and the ratio lm-eval / assay.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def write_assay_spec(work: Path, model: Path) -> Path:
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
    return tasks


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    e.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return e


def run_assay(work: Path, spec: Path, store: Path) -> tuple[float, dict[str, float]]:
    out = work / f"out-{store.name}"
    t0 = time.perf_counter()
    p = subprocess.run([str(BIN / "assay"), "run", str(spec), "--output", str(out), "--no-view"],
                       cwd=work, env={**env(), "ASSAY_STORE": str(store)}, capture_output=True,
                       text=True, timeout=1200)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"assay run failed ({p.returncode}):\n{p.stderr[-3000:]}")
    report = json.loads((out / "report.json").read_text())
    got: dict[str, float] = {}
    for doc in report["measurements"]:
        est = {e["name"]: e["value"] for e in doc.get("estimates", [])}
        if doc["kind"] == "choice_accuracy":
            got["acc"] = est["acc"]
        elif doc["kind"] == "perplexity":
            got["word_perplexity"] = est["word_perplexity"]
    return wall, got


def run_lmeval(work: Path, tasks: Path, model: Path, i: int) -> tuple[float, dict[str, float]]:
    out = work / f"lm-{i}"
    t0 = time.perf_counter()
    p = subprocess.run([str(BIN / "lm_eval"), "--model", "hf", "--model_args",
                        f"pretrained={model},dtype=float32", "--tasks", "mc_tiny,ppl_tiny",
                        "--include_path", str(tasks), "--batch_size", "16", "--device", "cpu",
                        "--output_path", str(out)],
                       cwd=work, env=env(), capture_output=True, text=True, timeout=1200)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"lm_eval failed ({p.returncode}):\n{p.stderr[-3000:]}")
    res = json.loads(next(out.rglob("results*.json")).read_text())["results"]
    return wall, {"acc": float(res["mc_tiny"]["acc,none"]),
                  "word_perplexity": float(res["ppl_tiny"]["word_perplexity,none"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--questions", type=int, default=36)
    ap.add_argument("--docs", type=int, default=24)
    args = ap.parse_args()
    from helpers.tiny_bpe import build_tiny_bpe_lm

    work = Path(tempfile.mkdtemp(prefix="race-lmeval-"))
    model = build_tiny_bpe_lm(work / "model", hidden=64, layers=2)
    write_data(work, args.questions, args.docs)
    spec = write_assay_spec(work, model)
    tasks = write_lmeval_tasks(work)
    run_assay(work, spec, work / "store-warmup")  # the folder's Prefect database, once
    walls: dict[str, list[float]] = {"assay": [], "lm-eval": []}
    for r in range(args.repeats):
        sides = ["assay", "lm-eval"] if r % 2 == 0 else ["lm-eval", "assay"]
        for side in sides:
            if side == "assay":
                wall, got = run_assay(work, spec, work / f"store-{r}")
                ours = got
            else:
                wall, got = run_lmeval(work, tasks, model, r)
                theirs = got
            walls[side].append(wall)
            print(f"repeat {r + 1} {side:8s} {wall:6.2f} s  {got}", flush=True)
        for k in ("acc", "word_perplexity"):
            a, b = ours[k], theirs[k]
            if abs(a - b) > 1e-4 * max(1.0, abs(b)):
                raise SystemExit(f"{k} differs: assay {a} vs lm-eval {b}")
    ma, ml = statistics.median(walls["assay"]), statistics.median(walls["lm-eval"])
    print(f"median wall: assay {ma:.2f} s, lm-eval {ml:.2f} s; lm-eval / assay = {ml / ma:.2f}x")


if __name__ == "__main__":
    main()

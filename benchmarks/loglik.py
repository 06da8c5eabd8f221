"""Benchmark: multiple-choice log-likelihood scoring on CPU, assay's hf scorer vs lm-eval's HFLM
on the same model directory and the same (context, continuation) pairs, medians of repeats.

Run: ``.venv/bin/python benchmarks/loglik.py [--questions 144] [--repeats 3] [--vocab 32000]
[--cold]`` (needs lm-eval: the ``dev`` extra).

The model: a random Llama (4 layers, hidden 256) with the tests' byte-level BPE tokenizer and an
output layer of ``--vocab`` logits (a real checkpoint's vocabulary size). The data: the shipped
MMLU-shaped fixture (configs/data/mmlu_tiny), questions repeated to ``--questions`` with a
number so each context differs, 5-shot from dev, rendered by assay's own choices: source.
Two workloads:

- ``letters``: MMLU's " A" .. " D" (one-token continuations after one shared context);
- ``texts``: the choice texts themselves (multi-token continuations, HellaSwag/ARC style).

Both sides: fp32, no cache (assay without a store; lm-eval without ``use_cache``), batch size
chosen per side (lm-eval ``batch_size=16``; assay ``batch_tokens=8192``). Checks that every
log-likelihood agrees within 1e-5 relative (1e-4 absolute on one-token choices), then prints
choices per second per side and the ratio.

Measured 2026-12-02 on the shared 2-core CPU box (load average 10-13 from other jobs), 48
questions (192 choices, ~255-token 5-shot contexts), 3 repeats, vocab 32000:
letters 30.7 s lm-eval vs 13.4 s assay (2.3x; 6.2 vs 14.3 choices/s; max |diff| 2.3e-5);
texts 132.7 s vs 51.9 s (2.6x; 1.4 vs 3.7 choices/s; max |diff| 1.2e-4, 4.8e-7 relative).
Where the time goes: both sides run the same forward rows (48 for letters: one per question,
lm-eval's logits cache and our shared-input rows; 182 for texts); lm-eval computes the output
layer and a log_softmax over every position of every row ([batch, ~255, 32000]), assay only at
the continuation positions (``logits_to_keep``), so the rest of its time is the transformer
body. On GPU: not measured (no device in this session).

``--cold``: the same MMLU-shaped 5-shot work end to end, each side in a fresh Python process (a
cold start: imports, model load, request building, scoring, metrics): lm-eval's
``simple_evaluate`` over a task YAML (``fewshot_config: {sampler: first_n}``, dev split, the
subject's description rendered per document) against assay's ``run_study`` over
docs/lm-eval.md's MMLU recipe (the same contexts; a fresh store, so nothing cached; its report
included), and assay's ``kind: lm_eval`` source over the same YAML (lm-eval builds the requests,
assay scores). Prints each side's wall time from process start, its time to the first request
(the first forward pass starting), the accuracy (equal on all three) and the ratios. Measured
2026-12-05 (48 questions, 3 repeats, vocab 32000, load average 6-7 from other jobs): lm-eval
36.5 s, assay 32.5 s (1.12x), assay's lm_eval kind 36.1 s; first request at 16-19 s on each side
(mostly importing torch and transformers); see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))


def write_questions(path: Path, n_questions: int) -> list[dict[str, object]]:
    """The shipped MMLU-shaped questions repeated to ``n_questions`` in ``path`` (JSONL), each
    numbered so every context differs; returns the fixture's records."""
    src = REPO / "configs" / "data" / "mmlu_tiny"
    test = [json.loads(x) for x in (src / "test.jsonl").read_text().splitlines()]
    with open(path, "w") as f:
        for i in range(n_questions):
            r = dict(test[i % len(test)])
            r["question"] = f"{i} {r['question']}"
            f.write(json.dumps(r) + "\n")
    return test


def pairs_for(n_questions: int, mode: str, model_dir: Path) -> list[tuple[str, str]]:
    from assay.spec import parse_spec

    tmp = Path(tempfile.mkdtemp())
    src = REPO / "configs" / "data" / "mmlu_tiny"
    write_questions(tmp / "test.jsonl", n_questions)
    (tmp / "dev.jsonl").write_text((src / "dev.jsonl").read_text())
    spec = parse_spec(f"""
version: 1
name: bench
sources:
  - name: s
    kind: file
    path: test.jsonl
    prompt_template: "{{{{ question }}}}\\nA. {{{{ choices[0] }}}}\\nB. {{{{ choices[1] }}}}\\n\\
      C. {{{{ choices[2] }}}}\\nD. {{{{ choices[3] }}}}\\nAnswer:"
    choices:
      model: {{kind: hf, path: "{model_dir}", dtype: float32}}
      {'templates: ["A", "B", "C", "D"]' if mode == 'letters' else 'field: choices'}
      fewshot: {{k: 5, path: dev.jsonl}}
""", source="bench.yaml", base_dir=str(tmp))
    rows = spec.sources[0].build(spec.paths)[0]
    out = []
    for r in rows:
        out += [(r["prompt"], " " + c) for c in r["privileged"]["choices"]]
    return out


COLD_TASK = """task: bench_mmlu
dataset_path: json
dataset_kwargs:
  data_files: {{test: {data}/test.jsonl, dev: {data}/dev.jsonl}}
test_split: test
fewshot_split: dev
fewshot_config: {{sampler: first_n}}
num_fewshot: 5
output_type: multiple_choice
description: "The following are multiple choice questions (with answers) about \\
  {{{{ subject.replace('_', ' ') }}}}.\\n\\n"
doc_to_text: "{{{{question.strip()}}}}\\nA. {{{{choices[0]}}}}\\nB. {{{{choices[1]}}}}\\n\\
  C. {{{{choices[2]}}}}\\nD. {{{{choices[3]}}}}\\nAnswer:"
doc_to_choice: ["A", "B", "C", "D"]
doc_to_target: answer
metric_list:
  - {{metric: acc, aggregation: mean, higher_is_better: true}}
"""


def _cold_side(side: str, work: Path, t_spawn: float) -> None:
    """One side of ``--cold``, in its own process: prints a JSON line of its timings."""
    import transformers

    first: list[float] = []
    forward = transformers.LlamaForCausalLM.forward

    def timed(self, *a, **kw):  # the first request reaching the model, on either side
        if not first:
            first.append(time.time())
        return forward(self, *a, **kw)

    transformers.LlamaForCausalLM.forward = timed
    model_dir = work / "m"
    if side == "lm-eval":
        from lm_eval import simple_evaluate
        from lm_eval.tasks import TaskManager

        res = simple_evaluate(model="hf", model_args=f"pretrained={model_dir},dtype=float32",
                              tasks=["bench_mmlu"], batch_size=16, device="cpu",
                              task_manager=TaskManager(include_path=str(work / "tasks"),
                                                       include_defaults=False),
                              bootstrap_iters=0, fewshot_random_seed=1234)
        acc = res["results"]["bench_mmlu"]["acc,none"]
    else:
        import yaml

        from assay.spec import parse_spec
        from assay.stages import concat_rows, run_study
        from assay.store import Store

        model = {"kind": "hf", "path": str(model_dir), "dtype": "float32"}
        if side == "assay":
            text = (REPO / "docs" / "lm-eval.md").read_text()
            block = text.split("# recipe: mmlu\n", 1)[1].split("```", 1)[0]
            src = yaml.safe_load(block)[0]
            src["path"], src["choices"]["model"] = str(work / "test.jsonl"), model
            src["choices"]["fewshot"]["path"] = str(work / "dev.jsonl")
        else:
            src = {"name": "mmlu", "kind": "lm_eval", "task": "bench_mmlu",
                   "include_path": str(work / "tasks"), "choices": {"model": model}}
        doc = {"version": 1, "name": "bench", "sources": [src],
               "measure": {"choice_accuracy": {}}}
        spec = parse_spec(yaml.safe_dump(doc), source="bench.yaml", base_dir=str(work))
        store = Store(work / f"store-{side}-{time.time_ns()}")
        run = run_study(spec, store, progress=None)
        rows = list(concat_rows(store, run.graded[src["name"]]))
        acc = sum(r["reward"] for r in rows) / len(rows)
    end = time.time()
    print("COLD " + json.dumps({"total": end - t_spawn, "first": first[0] - t_spawn,
                                "acc": acc}))


def cold_start(n_questions: int, repeats: int, vocab: int) -> None:
    """``--cold``: each side from a fresh process, ``repeats`` times; medians."""
    import subprocess

    from helpers.tiny_bpe import build_tiny_bpe_lm

    work = Path(tempfile.mkdtemp())
    build_tiny_bpe_lm(work / "m", hidden=256, layers=4, vocab=vocab, max_positions=2048)
    src = REPO / "configs" / "data" / "mmlu_tiny"
    test = [json.loads(x) for x in (src / "test.jsonl").read_text().splitlines()]
    with open(work / "test.jsonl", "w") as f:
        for i in range(n_questions):
            f.write(json.dumps({**test[i % len(test)],
                                "question": f"{i} {test[i % len(test)]['question']}"}) + "\n")
    (work / "dev.jsonl").write_text((src / "dev.jsonl").read_text())
    (work / "tasks").mkdir()
    (work / "tasks" / "bench_mmlu.yaml").write_text(COLD_TASK.format(data=work))
    got: dict[str, list[dict[str, float]]] = {"lm-eval": [], "assay": [], "assay-lm_eval": []}
    for _ in range(repeats):
        for side in got:
            t0 = time.time()
            out = subprocess.run([sys.executable, __file__, "--cold-side", side, str(work),
                                  repr(t0)], capture_output=True, text=True, check=True,
                                 timeout=3600)
            line = next(x for x in out.stdout.splitlines() if x.startswith("COLD "))
            got[side].append(json.loads(line[5:]))
    print(f"cold start: {n_questions} MMLU-shaped questions, 5-shot first_n, Llama 4x256, vocab "
          f"{vocab}; medians of {repeats} fresh processes per side")
    med = {side: {k: statistics.median(r[k] for r in runs) for k in ("total", "first")}
           for side, runs in got.items()}
    for side, runs in got.items():
        print(f"  {side:14s} total {med[side]['total']:7.2f} s  first request at "
              f"{med[side]['first']:6.2f} s  acc {runs[0]['acc']:.4f}  (totals: "
              f"{', '.join(format(r['total'], '.2f') for r in runs)})")
    accs = {runs[0]["acc"] for runs in got.values()}
    assert len(accs) == 1, f"the sides disagree on accuracy: {accs}"
    print(f"  ratio lm-eval / assay: {med['lm-eval']['total'] / med['assay']['total']:.2f}x; "
          f"lm-eval / assay's lm_eval kind: "
          f"{med['lm-eval']['total'] / med['assay-lm_eval']['total']:.2f}x")


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--cold-side":
        _cold_side(sys.argv[2], Path(sys.argv[3]), float(sys.argv[4]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=144)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--modes", default="letters,texts")
    ap.add_argument("--cold", action="store_true", help="the 5-shot work end to end, each side "
                    "from a fresh process (module docstring)")
    args = ap.parse_args()
    if args.cold:
        cold_start(args.questions, args.repeats, args.vocab)
        return

    import numpy as np
    import torch
    from helpers.tiny_bpe import build_tiny_bpe_lm
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    from assay.models.hf_loglik import HFScorer

    torch.set_num_threads(max(1, torch.get_num_threads()))
    model_dir = build_tiny_bpe_lm(Path(tempfile.mkdtemp()) / "m", hidden=256, layers=4,
                                  vocab=args.vocab, max_positions=2048)
    ours = HFScorer({"kind": "hf", "path": str(model_dir), "dtype": "float32",
                     "batch_tokens": 8192})
    theirs = HFLM(pretrained=str(model_dir), dtype="float32", batch_size=16, device="cpu")
    print(f"model: Llama 4x256, vocab {args.vocab}; {args.questions} questions, 5-shot; "
          f"torch threads {torch.get_num_threads()}")
    for mode in args.modes.split(","):
        pairs = pairs_for(args.questions, mode, model_dir)
        reqs = [Instance(request_type="loglikelihood", doc={}, arguments=p, idx=i)
                for i, p in enumerate(pairs)]
        t_ours, t_theirs = [], []
        for _ in range(args.repeats):
            ours.stats = {k: 0 for k in ours.stats}
            t0 = time.perf_counter()
            a = ours.score(pairs)
            t_ours.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            b = theirs.loglikelihood(reqs, disable_tqdm=True)
            t_theirs.append(time.perf_counter() - t0)
        la, lb = np.array([x.logprob for x in a]), np.array([x[0] for x in b])
        diff = float(np.max(np.abs(la - lb)))
        rel = float(np.max(np.abs(la - lb) / np.abs(lb)))
        assert rel < 1e-5, f"log-likelihoods differ by {diff} ({rel:.1e} relative)"
        mo, mt = statistics.median(t_ours), statistics.median(t_theirs)
        ctx_tokens = sum(len(ours.encode(c)) for c, _ in pairs[::4])
        print(f"{mode}: {len(pairs)} choices, {ctx_tokens} context tokens; "
              f"forward rows {ours.stats['forward_rows']}, batches {ours.stats['batches']}, "
              f"padded tokens {ours.stats['padded_tokens']}")
        print(f"  lm-eval HFLM  {mt:7.2f} s  {len(pairs) / mt:8.1f} choices/s  (median of "
              f"{args.repeats}: {', '.join(f'{t:.2f}' for t in t_theirs)})")
        print(f"  assay hf      {mo:7.2f} s  {len(pairs) / mo:8.1f} choices/s  (median of "
              f"{args.repeats}: {', '.join(f'{t:.2f}' for t in t_ours)})")
        print(f"  ratio lm-eval / assay: {mt / mo:.2f}x; max |diff| {diff:.1e} "
              f"({rel:.1e} relative)")


if __name__ == "__main__":
    main()

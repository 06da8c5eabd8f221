"""Benchmark: reward scoring with length-sorted token-budget batching vs a naive fixed-16 loop.

Also times the offline audit of the built-in diagnostic set with the bundled embedding model.

The naive loop is the peer reward-lens approach: batches of 16 (prompt, response) items in input
order, every prompt embedded again for each of its responses. Ours (``model.score``) embeds each
distinct text once, sorts by token length and fills batches up to a padded-token budget. A
middle variant (sorted budget batches, no de-duplication) separates the two effects. Same model,
same data (the diagnostic set's inputs plus N synthetic pairs), same forward function; scores
are compared item by item. Timings are medians of ``--repeats`` runs.

Row scoring (``--rows``): the score-rows stage on the quickstart's 1,312 completions (two arms,
six shards) with the bundled model, cold (fresh store; with and without the model load), every
stage cached, and re-graded (new verdicts: the stage reruns, the scores come from the row-score
cache), next to scoring the completions one by one with the same loaded model; scores compared.

Usage:
    .venv/bin/python benchmarks/reward_scoring.py                 # 10k synthetic pairs, 3 repeats
    .venv/bin/python benchmarks/reward_scoring.py --rows --repeats 3   # row scoring only
    .venv/bin/python benchmarks/reward_scoring.py --synthetic 2000 --repeats 3
    .venv/bin/python benchmarks/reward_scoring.py --hf path/to/local/reward-model
    .venv/bin/python benchmarks/reward_scoring.py --hf-built 256 4 --repeats 3  # alone vs padded

On a machine with CUDA the models run there (device="auto") and the tokens/s and pairs/s lines
are the GPU numbers.

Measured 2026-11-30 on the 2-core dev VM (CPU, no GPU lent), diagnostic set + 10,000 synthetic
pairs (20,832 items, 863k tokens), medians of 3: naive fixed-16 loop 402.6 s; sorted token-budget
batches 171.2 s (2.35x); ours (de-duplicated + sorted) 118.1 s (3.41x, target >= 2x); largest
score difference to the naive loop 2.6e-07. Offline audit of the diagnostic set: 26.1 s.

Row scoring measured 2026-12-01 on the same 2-core VM, quiet, ``--rows --repeats 3`` (medians):
score-rows cold 20.0 s with the model load, 17.8 s with the model loaded (73.5 rows/s); every
stage cached 0.012 s (1,442x); re-graded with the scores from the row-score cache 0.152 s (118x,
one run); one by one with the loaded model, timed on 240 rows spread over the 6 shards, 16.8
rows/s: the stage is 4.4x one by one cold, the batched call it makes 4.1x. Largest score
difference to one by one 1.7e-07. (Under load 9-15 from other suites the same run took 239 s
cold and one by one 0.6 rows/s: the ratio then was 9.1x.)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WORDS = ("the a of to and in is it that for on with as was by at from this be are or an have "
         "answer question model value result because therefore however example number data "
         "system function error test water light energy plant city river country history "
         "science method process simple common important different possible specific").split()


def synthetic(n_pairs: int, seed: int = 0, pairs_per_prompt: int = 5
              ) -> tuple[list[str], list[str], list[str]]:
    """``n_pairs`` pairs (prompt, chosen, rejected) over ``n_pairs / pairs_per_prompt`` prompts;
    response lengths log-uniform in 2..80 words so a batch in input order mixes lengths."""
    rng = np.random.default_rng(seed)
    n_prompts = max(1, n_pairs // pairs_per_prompt)
    prompts = [" ".join(rng.choice(WORDS, rng.integers(5, 25))) + "?" for _ in range(n_prompts)]
    P, C, R = [], [], []
    for i in range(n_pairs):
        P.append(prompts[i % n_prompts])
        for out in (C, R):
            n = int(np.exp(rng.uniform(np.log(2), np.log(80))))
            out.append(" ".join(rng.choice(WORDS, n)) + ".")
    return P, C, R


def diagnostic_inputs() -> tuple[list[str], list[str]]:
    from assay.reward.auditing import default_views
    from assay.reward.scoring import view_inputs

    P: list[str] = []
    R: list[str] = []
    for v in default_views().values():
        p, r, _ = view_inputs(v)
        P += p
        R += r
    return P, R


def timed(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def bench_embedding(prompts: list[str], responses: list[str], repeats: int) -> None:
    from assay.reward import EmbeddingRewardModel
    from assay.reward.batching import fixed_batches

    t = time.perf_counter()
    rm = EmbeddingRewardModel()
    print(f"model: bundled all-MiniLM-L6-v2 on {rm.device}, loaded in "
          f"{time.perf_counter() - t:.1f}s")

    def naive() -> np.ndarray:
        out = np.empty(len(prompts))
        for idx in fixed_batches(len(prompts), 16):
            p = rm._embed_batch([prompts[i] for i in idx])
            r = rm._embed_batch([responses[i] for i in idx])
            out[idx] = (p.astype(np.float64) * r).sum(axis=1)
        return out

    def sorted_no_dedupe() -> np.ndarray:
        emb, _ = rm.embed(prompts + responses)
        n = len(prompts)
        return (emb[:n].astype(np.float64) * emb[n:]).sum(axis=1)

    def ours() -> np.ndarray:
        return rm.score(prompts, responses)

    t_ours, s_ours = timed(ours, repeats)
    run = rm.last_run
    t_sorted, s_sorted = timed(sorted_no_dedupe, repeats)
    t_naive, s_naive = timed(naive, repeats)
    tokens = int(rm.token_lengths(prompts + responses).clip(max=rm.max_seq_length).sum())
    print(f"items: {len(prompts)} (prompt, response) pairs, {tokens} tokens without de-duplication")
    print(f"naive fixed-16 input order : {t_naive:8.2f}s  {len(prompts) / t_naive:9.1f} items/s  "
          f"{tokens / t_naive:10.0f} tokens/s")
    print(f"sorted token budget        : {t_sorted:8.2f}s  ratio {t_naive / t_sorted:5.2f}x")
    print(f"ours (dedupe + sorted)     : {t_ours:8.2f}s  ratio {t_naive / t_ours:5.2f}x  "
          f"({run.n_scored} distinct texts, {run.n_batches} batches, {run.n_padded_tokens} "
          f"padded tokens)")
    print(f"pairs/s (ours): {len(prompts) / 2 / t_ours:.1f}; max |score diff| vs naive: "
          f"{np.abs(s_ours - s_naive).max():.2e} (sorted: {np.abs(s_sorted - s_naive).max():.2e})")
    assert np.allclose(s_ours, s_naive, atol=1e-4), "scores differ beyond tolerance"


def bench_hf(path: str, prompts: list[str], responses: list[str], repeats: int) -> None:
    from assay.reward import HFRewardModel
    from assay.reward.batching import fixed_batches

    rm = HFRewardModel(path)
    print(f"model: {path} on {rm.device} ({rm.dtype}, {rm.info['head']}, "
          f"attn {rm.info['attn_implementation']})")
    ids, tts, _ = rm.encode(prompts, responses)

    def naive() -> np.ndarray:
        out = np.empty(len(ids))
        for idx in fixed_batches(len(ids), 16):
            out[idx] = rm._forward(ids, tts, idx)
        return out

    t_ours, s_ours = timed(lambda: rm.score(prompts, responses), repeats)
    t_naive, s_naive = timed(naive, repeats)
    tokens = sum(map(len, ids))
    print(f"naive fixed-16: {t_naive:.2f}s; ours: {t_ours:.2f}s; ratio {t_naive / t_ours:.2f}x; "
          f"{tokens / t_ours:.0f} tokens/s, {len(ids) / 2 / t_ours:.1f} pairs/s; "
          f"max |diff| {np.abs(s_ours - s_naive).max():.2e}")
    print(rm.check_invariance())


def bench_hf_built(hidden: int, layers: int, n_items: int, repeats: int) -> None:
    """Each input alone (the default since issue 49) vs the padded token-budget batches it
    replaced, on a random Llama reward model built here (device_check's), ``n_items`` inputs of
    5-60 words per side; medians, and how many scores' bits differ between the two."""
    import tempfile

    from assay.reward import HFRewardModel
    from benchmarks.device_check import build_models, word_texts

    with tempfile.TemporaryDirectory() as tmp:
        rm_dir, _ = build_models(Path(tmp), {"rm_hidden": hidden, "rm_layers": layers,
                                             "lm_hidden": 8, "lm_layers": 1})
        prompts, responses = word_texts(n_items, 5, 60, 1), word_texts(n_items, 5, 60, 2)
        alone = HFRewardModel(rm_dir)
        padded = HFRewardModel(rm_dir, batching="padded")
        t_alone, s_alone = timed(lambda: alone.score(prompts, responses), repeats)
        t_pad, s_pad = timed(lambda: padded.score(prompts, responses), repeats)
        # the old scoring exactly: padded batches at torch's own thread count (nothing pinned)
        import os

        import torch

        threads = torch.get_num_threads()
        os.environ["ASSAY_LOGLIK_THREADS"] = str(threads)
        try:
            t_old, _ = timed(lambda: padded.score(prompts, responses), repeats)
        finally:
            os.environ.pop("ASSAY_LOGLIK_THREADS")
        assert alone.last_run is not None and padded.last_run is not None
        tokens = alone.last_run.n_tokens
        differ = int(np.sum(s_alone.view(np.uint64) != s_pad.view(np.uint64)))
        print(f"hf Llama {layers}x{hidden} on {alone.device} ({alone.dtype}), {n_items} inputs, "
              f"{tokens} tokens: alone {t_alone:.2f}s ({tokens / t_alone:.0f} tokens/s, "
              f"{alone.last_run.n_batches} passes); padded {t_pad:.2f}s "
              f"({tokens / t_pad:.0f} tokens/s, {padded.last_run.n_batches} batches); "
              f"alone/padded {t_alone / t_pad:.2f}x; padded at torch's {threads} threads (the "
              f"old scoring) {t_old:.2f}s, alone/old {t_alone / t_old:.2f}x; bits differ in "
              f"{differ} of {n_items}, max |diff| {np.abs(s_alone - s_pad).max():.2e}")


def bench_audit() -> None:
    from assay.reward import EmbeddingRewardModel, audit

    t = time.perf_counter()
    rm = EmbeddingRewardModel()
    res = audit(rm, cache=False)
    total = time.perf_counter() - t
    print(res.report())
    print(f"offline audit of the built-in diagnostic set: {total:.1f}s wall including model "
          f"load (target < 60s on 2 cores)")


def quickstart_shards(store, spec) -> dict[str, list]:
    """The quickstart arms' completions (164 problems x 4 samples x 2 arms = 1,312), stored as
    the chain stores them: shards of about ``shard_rows`` rows per source, whole tasks each."""
    from assay import stages
    from assay.rows import Rows

    out = {}
    for src in spec.reward.score.sources:
        ctx = stages.RunContext(store, spec, source=src)
        rows = stages.load_rows(store, stages.run_filter_rows(ctx, stages.run_build_rows(ctx)))
        bounds = stages.shard_bounds(rows, spec.execution.shard_rows)
        parts = []
        for i, (lo, hi) in enumerate(bounds):
            part = Rows(rows.to_arrow().slice(lo, hi - lo))
            key = store.put_table(part.to_arrow())
            parts.append(stages.StageResult("grade", f"{src} shard {i + 1}/{len(bounds)}", key,
                                            {"rows": key}, {"rows": part.checksum()}))
        out[src] = parts
    return out


def bench_rows(repeats: int, one_by_one_rows: int = 240) -> None:
    """Row scoring in the chain (the score-rows stage) on the quickstart's 1,312 completions with
    the bundled model: cold (fresh store, model loaded), cold with the model already loaded,
    cached (every stage a hit), re-graded (new verdicts: the stage reruns, scores come from the
    row-score cache), next to scoring the completions one by one with the same loaded model."""
    import tempfile

    import yaml

    from assay import stages
    from assay.rows import Rows
    from assay.spec import parse_spec
    from assay.stages.score_rows import clear_model_cache, score_inputs, scoring_inputs
    from assay.store import Store

    root = Path(__file__).resolve().parents[1]
    doc = yaml.safe_load((root / "configs" / "quickstart.yaml").read_text())
    doc["reward"] = {"models": [{"name": "minilm", "kind": "embedding"}], "data": None,
                     "score": {"sources": ["base", "tuned"]}}
    doc.pop("decontaminate")
    spec = parse_spec(yaml.safe_dump(doc), base_dir=str(root / "configs"))
    tmp = Path(tempfile.mkdtemp(prefix="bench-rows-"))
    data_store = Store(tmp / "data")
    shards = quickstart_shards(data_store, spec)
    n = sum(len(stages.load_rows(data_store, p)) for ps in shards.values() for p in ps)
    print(f"row scoring: {n} quickstart completions in "
          f"{sum(len(ps) for ps in shards.values())} shards, bundled all-MiniLM-L6-v2")

    def score_all(store):
        return [stages.run_score_rows(stages.RunContext(store, spec, source=src), p,
                                      stages.Shard(i, len(ps), (0, 0)))
                for src, ps in shards.items() for i, p in enumerate(ps)]

    counter = [0]

    def fresh_store():
        counter[0] += 1
        s = Store(tmp / f"s{counter[0]}")
        for ps in shards.values():  # the shards' rows, as the grade stage would have left them
            for p in ps:
                s.put_table(stages.load_rows(data_store, p).to_arrow())
        return s

    t_cold_load = []
    for _ in range(repeats):
        st = fresh_store()
        clear_model_cache()
        t = time.perf_counter()
        score_all(st)
        t_cold_load.append(time.perf_counter() - t)
    t_cold_load = statistics.median(t_cold_load)

    t_cold = []
    for _ in range(repeats):
        st = fresh_store()  # the model stays loaded from the previous run
        t = time.perf_counter()
        res = score_all(st)
        t_cold.append(time.perf_counter() - t)
    t_cold = statistics.median(t_cold)
    assert all(not r.cached for r in res)
    t_cached, again = timed(lambda: score_all(st), repeats)
    assert all(r.cached for r in again)

    # new verdicts on every shard (as a new verifier gives): same texts, different rows
    regraded = {}
    for src, ps in shards.items():
        regraded[src] = []
        for p in ps:
            t = stages.load_rows(data_store, p).to_arrow()
            t = t.set_column(t.column_names.index("reward"), "reward",
                             pa_array([1.0] * len(t)))
            key = st.put_table(t)
            regraded[src].append(stages.StageResult("grade", p.label, key, {"rows": key},
                                                    {"rows": Rows(t).checksum()}))
    t = time.perf_counter()
    rescored = [stages.run_score_rows(stages.RunContext(st, spec, source=src), p,
                                      stages.Shard(i, len(ps), (0, 0)))
                for src, ps in regraded.items() for i, p in enumerate(ps)]
    t_regraded = time.perf_counter() - t
    assert all(r.summary["scores"] == {"rm:minilm": "cached"} for r in rescored)

    model = spec.reward.models[0].build(spec.paths)  # the same bundled model, loaded once more
    tables = [stages.load_rows(data_store, p).to_arrow() for ps in shards.values() for p in ps]
    inputs = [scoring_inputs(t) for t in tables]

    # One by one is ~10x slower: time it on the first `one_by_one_rows` rows (spread over every
    # shard) and compare rates, so the run fits in minutes with medians of `repeats`.
    per = max(1, one_by_one_rows // len(inputs))
    sub = [(p[:per], r[:per]) for p, r, _, _ in inputs]
    n_sub = sum(len(p) for p, _ in sub)
    sub_idx = np.concatenate([np.arange(min(per, len(x[0]))) + off for x, off in
                              zip(inputs, np.cumsum([0] + [len(x[0]) for x in inputs[:-1]]))])

    def one_by_one():
        return np.concatenate([[model.score([p[i]], [r[i]])[0] for i in range(len(p))]
                               for p, r in sub])

    def batched():
        return np.concatenate([score_inputs(model, *x) for x in inputs])

    t_one, s_one = timed(one_by_one, repeats)
    t_batch, s_batch = timed(batched, repeats)
    stage_scores = np.concatenate([[dict(m)["rm:minilm"] for m in
                                    stages.load_rows(st, r).to_arrow()
                                    .column("markers").to_pylist()]
                                   for r in res])
    print(f"score-rows, cold store, model load included : {t_cold_load:8.2f}s")
    print(f"score-rows, cold store, model loaded        : {t_cold:8.2f}s  {n / t_cold:7.1f} rows/s")
    print(f"score-rows, every stage cached              : {t_cached:8.3f}s  ratio vs cold "
          f"{t_cold / t_cached:7.1f}x")
    print(f"score-rows, re-graded (scores cached)       : {t_regraded:8.3f}s  ratio vs cold "
          f"{t_cold / t_regraded:7.1f}x (one run)")
    r_one, r_batch, r_cold = n_sub / t_one, n / t_batch, n / t_cold
    print(f"one by one, model loaded ({n_sub} rows)       : {t_one:8.2f}s  {r_one:7.1f} rows/s")
    print(f"batched (what the stage calls), model loaded: {t_batch:8.2f}s  {r_batch:7.1f} rows/s; "
          f"rate ratio vs one by one {r_batch / r_one:5.2f}x; stage cold vs one by one "
          f"{r_cold / r_one:5.2f}x")
    print("max |score diff| one-by-one vs stage: "
          f"{np.abs(s_one - stage_scores[sub_idx]).max():.2e}, batched vs stage: "
          f"{np.abs(s_batch - stage_scores).max():.2e}")
    assert np.allclose(s_one, stage_scores[sub_idx], atol=1e-4)


def pa_array(values):
    import pyarrow as pa

    return pa.array(values, pa.float64())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--synthetic", type=int, default=10_000, help="synthetic pairs (default 10k)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hf", default=None, help="also benchmark a local HF reward model")
    ap.add_argument("--skip-audit", action="store_true")
    ap.add_argument("--rows", action="store_true",
                    help="only the row-scoring run (quickstart's 1,312 completions)")
    ap.add_argument("--one-by-one-rows", type=int, default=240,
                    help="rows the one-by-one baseline scores (its rate is compared)")
    ap.add_argument("--hf-built", type=int, nargs=2, metavar=("HIDDEN", "LAYERS"), default=None,
                    help="only: each input alone vs padded batches on a random Llama built here")
    ap.add_argument("--hf-items", type=int, default=512, help="inputs for --hf-built")
    args = ap.parse_args()
    if args.hf_built:
        bench_hf_built(*args.hf_built, args.hf_items, args.repeats)
        return
    if args.rows:
        bench_rows(args.repeats, args.one_by_one_rows)
        return
    if not args.skip_audit:
        bench_audit()
        print()
    P, R = diagnostic_inputs()
    sp, sc, sr = synthetic(args.synthetic)
    prompts = P + sp + sp
    responses = R + sc + sr
    print(f"data: diagnostic set ({len(P)} responses) + {args.synthetic} synthetic pairs "
          f"({2 * args.synthetic} responses); repeats {args.repeats}")
    bench_embedding(prompts, responses, args.repeats)
    if args.hf:
        bench_hf(args.hf, prompts, responses, args.repeats)


if __name__ == "__main__":
    main()

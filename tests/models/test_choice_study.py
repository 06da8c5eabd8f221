"""A multiple-choice study end to end: choices: source -> score-choices -> choice_accuracy and a
paired compare between two checkpoints -> report; a rerun is served from the cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _spec(tmp: Path, ckpts: dict[str, Path]):
    from assay.spec import parse_spec

    srcs = "".join(f"""
  - name: {name}
    kind: file
    path: mmlu_tiny/test.jsonl
    fields: {{prompt: question, task_id: qid}}
    choices:
      model: {{kind: hf, path: "{p}", dtype: float32}}
      answer: answer
      fewshot: {{k: 1, path: mmlu_tiny/dev.jsonl}}
""" for name, p in ckpts.items())
    return parse_spec(f"""
version: 1
name: mc
sources:{srcs}
measure:
  choice_accuracy: {{by: subject}}
  compare: [{{before: base, after: tuned, metrics: [pass@1, acc_norm]}}]
""", source="mc.yaml", base_dir=str(tmp))


@pytest.fixture
def data(tmp_path: Path) -> Path:
    (tmp_path / "mmlu_tiny").mkdir()
    for split in ("test", "dev"):
        src = ROOT / "configs" / "data" / "mmlu_tiny" / f"{split}.jsonl"
        lines = src.read_text().splitlines()
        out = [json.dumps({**json.loads(x), "qid": f"{split}{i}"}) for i, x in enumerate(lines)]
        (tmp_path / "mmlu_tiny" / f"{split}.jsonl").write_text("\n".join(out) + "\n")
    return tmp_path


@pytest.mark.slow  # ~35 s: two tiny models, a study run twice
def test_choice_study_end_to_end(data: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    from helpers.tiny_bpe import build_tiny_bpe_lm

    from assay.stages import concat_rows, load_doc, run_study
    from assay.store import Store

    base = build_tiny_bpe_lm(tmp_path_factory.mktemp("base"), seed=0)
    tuned = build_tiny_bpe_lm(tmp_path_factory.mktemp("tuned"), seed=1)
    spec = _spec(data, {"base": base, "tuned": tuned})
    store = Store(data / "store")
    from assay.progress import listen

    seen: list = []
    stop = listen(lambda st: seen.append(st) if st.stage == "score-choices" else None)
    try:
        run = run_study(spec, store, progress=None)
    finally:
        stop()
    last = {st.label: st for st in seen}  # live progress: every choice of each shard advanced
    assert sorted((st.done, st.total) for st in last.values()) == [(144, 144), (144, 144)]
    rows = list(concat_rows(store, run.graded["base"]))
    assert len(rows) == 36 and len({r["task_id"] for r in rows}) == 36  # one row per question
    r = rows[0]
    meta = r["judge_meta"]
    assert r["final_text"] == r["privileged"]["choices"][meta["pred"]]
    assert r["reward"] == float(meta["pred"] == r["privileged"]["gold"])
    assert r["markers"]["acc_norm"] == float(meta["pred_norm"] == r["privileged"]["gold"])
    assert len(meta["loglik"]) == 4 and len(meta["is_greedy"]) == 4
    assert meta["loglik_per_char"][0] == pytest.approx(meta["loglik"][0] / len(
        r["privileged"]["choices"][0]))
    assert r["prompt"].count("\n\n") == 1  # one solved example, then the question
    assert set(r["meta"]) == {"subject"}  # question, choices, answer, id are not repeated
    measured = next(x for x in run.results if x.stage == "measure")
    docs = {(d["kind"], d.get("source")): d for d in load_doc(store, measured, "measurements")}
    acc = docs["choice_accuracy", "base"]["data"]
    assert acc["acc"]["value"] == pytest.approx(sum(x["reward"] for x in rows) / 36)
    subjects = sorted({x["meta"]["subject"] for x in rows})
    assert [c["category"] for c in acc["categories"]] == subjects
    compared = {m["metric"] for m in docs["compare", None]["data"]["metrics"]}
    assert compared == {"pass@1", "marker:acc_norm"}
    report = next(x for x in run.results if x.stage == "report")
    md = store.get_bytes(report.outputs["file:report.md"]).decode()
    assert "choice_accuracy[base] by subject" in md and "log-likelihood (hf" in md
    again = run_study(spec, store, progress=None)
    assert again.computed_stages == []


"""Perplexity sources end to end (equal to lm-eval's aggregates on a tiny model), and the
coverage of the delta-method interval over documents, by simulation."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from assay.measure.perplexity import perplexity, ratio_interval

#: A study of one perplexity: source over docs.jsonl, scored by ``model`` (a YAML mapping).
PPL_SPEC = """
version: 1
name: ppl
sources:
  - name: held_out
    kind: file
    path: docs.jsonl
    perplexity: {{model: {model}}}
measure:
  perplexity: {{}}
"""


def test_ratio_interval_covers_by_simulation() -> None:
    """Documents of lognormal length with a per-document difficulty: the 95% interval of
    sum(nll)/sum(words) covers the population ratio in 93-97% of 600 studies of 60 documents."""
    rng = np.random.default_rng(29)
    # the population ratio, from a very large sample of the same generator
    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        words = np.ceil(rng.lognormal(4.0, 0.8, n))
        rate = rng.gamma(4.0, 0.75, n)  # nats per word, varying by document
        return rate * words + rng.normal(0, 1, n) * np.sqrt(words), words

    a, b = draw(2_000_000)
    truth = a.sum() / b.sum()
    hits = 0
    for _ in range(600):
        a, b = draw(60)
        _, (lo, hi) = ratio_interval(a, b)
        hits += lo <= truth <= hi
    assert 0.93 <= hits / 600 <= 0.97, hits / 600


@pytest.mark.slow  # ~45 s on a loaded machine: lm-eval import, a study run
def test_perplexity_study_equals_lm_eval(tmp_path: Path) -> None:
    """A perplexity: source scored through the chain; word/byte perplexity and bits per byte
    equal lm-eval's aggregates of its own loglikelihood_rolling on the same model."""
    pytest.importorskip("lm_eval")
    from helpers.tiny_bpe import build_tiny_bpe_lm
    from lm_eval.api.instance import Instance
    from lm_eval.api.metrics import bits_per_byte, weighted_perplexity
    from lm_eval.models.huggingface import HFLM

    from assay.spec import parse_spec
    from assay.stages import load_doc, run_study
    from assay.store import Store

    model = build_tiny_bpe_lm(tmp_path / "m", max_positions=16, seed=5)
    root = Path(__file__).resolve().parents[2] / "configs" / "data" / "mmlu_tiny"
    docs = [json.loads(x)["question"] + " " + " ".join(json.loads(x)["choices"])
            for x in (root / "test.jsonl").read_text().splitlines()[:12]]
    with open(tmp_path / "docs.jsonl", "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    spec = parse_spec(PPL_SPEC.format(model=f'{{kind: hf, path: "{model}", dtype: float32}}'),
                      source="ppl.yaml", base_dir=str(tmp_path))
    store = Store(tmp_path / "store")
    run = run_study(spec, store, progress=None)
    measured = next(x for x in run.results if x.stage == "measure")
    doc = next(d for d in load_doc(store, measured, "measurements") if d["kind"] == "perplexity")
    got = {e["name"]: e["value"] for e in doc["estimates"]}
    lm = HFLM(pretrained=str(model), dtype="float32", batch_size=4, device="cpu")
    lls = lm.loglikelihood_rolling([Instance(request_type="loglikelihood_rolling", doc={},
                                             arguments=(d,), idx=i) for i, d in enumerate(docs)])
    words = [len(re.split(r"\s+", d)) for d in docs]
    nbytes = [len(d.encode()) for d in docs]
    assert got["word_perplexity"] == pytest.approx(weighted_perplexity(list(zip(lls, words))),
                                                   rel=1e-5)
    assert got["byte_perplexity"] == pytest.approx(weighted_perplexity(list(zip(lls, nbytes))),
                                                   rel=1e-5)
    assert got["bits_per_byte"] == pytest.approx(bits_per_byte(list(zip(lls, nbytes))), rel=1e-5)
    est = next(e for e in doc["estimates"] if e["name"] == "word_perplexity")
    assert est["low"] < est["value"] < est["high"] and est["n"] == 12
    assert math.isfinite(got["bits_per_byte"])


def test_perplexity_needs_scored_rows() -> None:
    from assay.errors import MeasureError

    with pytest.raises(MeasureError, match="no 'loglik' marker"):
        perplexity([{"task_id": "a", "markers": {"words": 3.0}}])


def test_perplexity_on_an_openai_server_is_refused_by_validate(tmp_path: Path) -> None:
    """An OpenAI-protocol server cannot score a document in the model's own windows: `assay
    validate` says so (exit 2, the field and the reason), instead of a crash mid-run."""
    import subprocess
    import sys

    (tmp_path / "docs.jsonl").write_text('{"text": "one document"}\n')
    (tmp_path / "ppl.yaml").write_text(PPL_SPEC.format(
        model='{kind: openai, base_url: "http://127.0.0.1:9/v1", model: m}'))
    p = subprocess.run([str(Path(sys.executable).with_name("assay")), "validate",
                        str(tmp_path / "ppl.yaml")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "perplexity.model" in p.stderr and "kind 'openai' cannot score perplexity" in p.stderr
    assert "kind: hf" in p.stderr and "Traceback" not in p.stderr


def test_template_and_count_field(tmp_path: Path) -> None:
    """perplexity.template renders the scored text; count_field's raw text gives the words and
    bytes; a record without it is an error naming the field and the record."""
    from assay.errors import SpecError
    from assay.spec import parse_spec

    recs = [{"page": "a @-@ b , c", "n": 1}, {"page": "é @-@ f", "n": 2}]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))

    def spec(extra: str):
        return parse_spec(f"""
version: 1
name: t
sources:
  - name: s
    kind: file
    path: d.jsonl
    perplexity: {{model: {{kind: hf, path: m}}, {extra}}}
""", source="t.yaml", base_dir=str(tmp_path))

    s = spec("template: '{{ page | replace(\" @-@ \", \"-\") | regex_replace(\" ,\", \",\") }}', "
             "count_field: page")
    rows = list(s.sources[0].build(s.paths)[0])
    assert [r["prompt"] for r in rows] == ["a-b, c", "é-f"]
    assert [r["markers"] for r in rows] == [{"words": 5.0, "bytes": 11.0},
                                            {"words": 3.0, "bytes": 8.0}]
    assert rows[0]["meta"] == {"page": "a @-@ b , c", "n": 1}
    s = spec("field: page, count_field: title")
    with pytest.raises(SpecError, match=r"record 1: field 'title' \(perplexity.count_field\)"):
        s.sources[0].build(s.paths)
    with pytest.raises(Exception, match="perplexity.template: Jinja2 syntax error"):
        spec("template: '{{ page | }}'")

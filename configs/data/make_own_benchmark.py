"""Write configs/data/own_benchmark/: a small GSM8K-shaped benchmark and two models' answers.

Seeded and deterministic, for ``configs/own_benchmark.yaml`` (runs offline, no user code).

- ``own_benchmark/problems/test.jsonl``: 36 word problems in three subjects (arithmetic,
  percentages, geometry), each ``{"question", "answer", "subject", "source": {"set", "number"}}``
  with a worked answer that ends in ``#### <number>`` as GSM8K's do (thousands with commas).
- ``own_benchmark/base.jsonl`` and ``own_benchmark/tuned.jsonl``: four answers per problem from
  two imaginary models (``{"problem", "text", "latency_ms", "tokens"}``), right with a
  subject-dependent chance that is higher for ``tuned`` on arithmetic and percentages.

Run: ``python configs/data/make_own_benchmark.py`` (overwrites the files).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

SEED = 20261201
OUT = Path(__file__).with_name("own_benchmark")
SKILL = {"base": {"arithmetic": 0.6, "percentages": 0.4, "geometry": 0.3},
         "tuned": {"arithmetic": 0.85, "percentages": 0.7, "geometry": 0.35}}


def problems(rng: random.Random) -> list[dict]:
    out = []
    for _ in range(12):
        a, b, c = rng.randint(120, 990), rng.randint(3, 40), rng.randint(2, 9)
        out.append({"question": f"A warehouse ships {a} boxes a day for {b} days, then {c} more "
                                "boxes. How many boxes did it ship?",
                    "answer": f"{a} * {b} = {a * b}. {a * b} + {c} = {a * b + c}."
                              f"\n#### {a * b + c:,}",
                    "subject": "arithmetic"})
    for _ in range(12):
        price, pct = rng.randint(2, 60) * 10, rng.choice([10, 20, 25, 30, 40, 50])
        out.append({"question": f"A coat costs ${price}. It is marked down {pct}%. "
                                "What is the new price in dollars?",
                    "answer": f"{pct}% of {price} is {price * pct // 100}. "
                              f"{price} - {price * pct // 100} = "
                              f"{price - price * pct // 100}.\n#### {price - price * pct // 100}",
                    "subject": "percentages"})
    for _ in range(12):
        w, h = rng.randint(3, 30), rng.randint(3, 30)
        out.append({"question": f"A rectangle is {w} cm wide and {h} cm tall. "
                                "What is its perimeter in cm?",
                    "answer": f"2 * ({w} + {h}) = {2 * (w + h)}.\n#### {2 * (w + h)}",
                    "subject": "geometry"})
    for i, p in enumerate(out):
        p["source"] = {"set": "assay-own-benchmark", "number": i}
    return out


def answers(rng: random.Random, probs: list[dict], model: str) -> list[dict]:
    out = []
    for i, p in enumerate(probs):
        gold = int(p["answer"].rsplit("#### ", 1)[1].replace(",", ""))
        for _ in range(4):
            right = rng.random() < SKILL[model][p["subject"]]
            said = gold if right else gold + rng.choice([-10, -2, -1, 1, 3, 100])
            text = f"Let me work it out step by step. The answer is {said:,}."
            out.append({"problem": i, "text": text, "latency_ms": rng.randint(300, 2400),
                        "tokens": len(text.split()) + rng.randint(20, 90)})
    return out


def main() -> None:
    rng = random.Random(SEED)
    probs = problems(rng)
    (OUT / "problems").mkdir(parents=True, exist_ok=True)
    files = {OUT / "problems" / "test.jsonl": probs}
    for model in SKILL:
        files[OUT / f"{model}.jsonl"] = answers(rng, probs, model)
    for path, records in files.items():
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                        encoding="utf-8")


if __name__ == "__main__":
    main()

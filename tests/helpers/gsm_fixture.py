"""A GSM8K-shaped benchmark built locally: problems saved with ``datasets.save_to_disk``
(question, answer ending in ``#### n``, subject) and a model's completions in a JSONL file.

The builder knows which completions are right, so tests compare what assay computes against
that truth (an independent reference), not against assay itself.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

SUBJECTS = {"arithmetic": 0.8, "geometry": 0.45, "probability": 0.2}  # chance a completion is right


def build(root: Path, *, tasks_per_subject: int = 12, k: int = 4, seed: int = 7) -> dict[str, Any]:
    """Write ``root/gsm`` (a DatasetDict with train/test) and ``root/completions.jsonl``; return
    the truth: per task its subject and the 0/1 correctness of each completion, in file order."""
    import datasets

    rng = random.Random(seed)
    rows: dict[str, list[Any]] = {"question": [], "answer": [], "subject": [], "source": []}
    truth: list[dict[str, Any]] = []
    completions = []
    idx = 0
    for subject, skill in SUBJECTS.items():
        for _ in range(tasks_per_subject):
            a, b = rng.randint(2, 40), rng.randint(2, 40)
            gold = a * b + (1000 if subject == "probability" else 0)
            rows["question"].append(f"[{subject}] A crate holds {a} rows of {b} jars. How many "
                                    f"jars? (case {idx})")
            rows["answer"].append(f"There are {a} rows of {b}, so {a} * {b} = {a * b}.\n#### "
                                  f"{gold:,}")
            rows["subject"].append(subject)
            rows["source"].append({"book": "synthetic", "page": idx})
            right = []
            for j in range(k):
                ok = rng.random() < skill
                right.append(int(ok))
                said = gold if ok else gold + rng.randint(1, 9)
                completions.append({"idx": idx,
                                    "completion": f"Work: {a} x {b}. The answer is {said}.",
                                    "latency_ms": 100 + 10 * j + idx})
            truth.append({"subject": subject, "right": right})
            idx += 1
    ds = datasets.Dataset.from_dict(rows)
    datasets.DatasetDict({"test": ds, "train": ds.select(range(3))}).save_to_disk(str(root / "gsm"))
    with open(root / "completions.jsonl", "w", encoding="utf-8") as f:
        for c in completions:
            f.write(json.dumps(c) + "\n")
    return {"tasks": truth, "k": k}


SPEC = """
name: gsm-own
sources:
  - name: model
    kind: hf_dataset
    path: gsm
    split: test
    prompt_template: "Solve it and end with 'The answer is N'.\\n\\nQuestion:
      {{ question }}\\nAnswer:"
    fields: {reference: answer, markers: [latency_ms]}
    reference_regex: "####\\\\s*(.+)$"
    completions: {path: completions.jsonl, key: idx}
    verifier: {kind: numeric}
measure:
  pass_at: {k: 4, by: subject}
"""

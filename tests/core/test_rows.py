"""The rows contract: the seed document's examples, round trips, and every bad-input error."""

import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import assay
from assay.errors import RowsError, RowsTypeError
from assay.rows import ROW_SCHEMA, Rows, as_table, task_id_for

QUESTIONS = ["What is 2 + 3?", "What is 7 * 6?", "What is 10 - 4?", "What is 9 / 3?"]
GOLD = ["5", "42", "6", "3"]
ANSWERS = [["5", "4", "5", "5"], ["41", "41", "42", "40"], ["6"] * 4, ["3", "2", "3", "3"]]
SCORES = [[1, 0, 1, 1], [0, 0, 1, 0], [1, 1, 1, 1], [1, 0, 1, 1]]


def test_import_assay_does_not_import_prefect_or_torch():
    # nor pandas at import (pyarrow loads it on first use): it was half of `import assay`, and the
    # CLI starts Prefect's server only after importing assay, so every import here delays a run
    code = ("import sys, assay; pd = 'pandas' in sys.modules; assay.rows(['q'], ['a'], [1]); "
            "print('prefect' in sys.modules, 'torch' in sys.modules, pd)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "False"]


def test_seed_example_given_scores_and_markers():
    lengths = [[{"chars": len(a)} for a in group] for group in ANSWERS]
    given = assay.rows(QUESTIONS, ANSWERS, SCORES, markers=lengths)
    assert len(given) == 16
    assert given[1]["reward"] == 0.0 and given[1]["markers"] == {"chars": 1.0}
    assert [r["reward"] for r in given] == [float(x) for g in SCORES for x in g]
    assert given[0]["judge_status"] == "given"
    assert len({r["task_id"] for r in given}) == 4


def test_seed_example_with_a_reference_judge():
    r = assay.rows(QUESTIONS, ANSWERS, lambda p, c, ref: c == ref, references=GOLD)
    assert [x["reward"] for x in r] == [1.0 if a == g else 0.0
                                        for a_s, g in zip(ANSWERS, GOLD) for a in a_s]
    assert r[0]["privileged"] == {"reference": "5"}
    assert r[0]["judge_name"] == "<lambda>" and r[0]["judge_status"] == "ok"
    assert r[0]["prompt"] == QUESTIONS[0] \
        and r[0]["messages"] == [{"role": "user", "content": QUESTIONS[0]}]
    assert [x["rollout_index"] for x in r[:4]] == [0, 1, 2, 3]


def test_message_prompts_hash_the_whole_conversation():
    a = [{"role": "user", "content": "Write a poem."}, {"role": "assistant", "content": "Roses..."},
         {"role": "user", "content": "Continue."}]
    b = [{"role": "user", "content": "Write code."}, {"role": "assistant", "content": "def f..."},
         {"role": "user", "content": "Continue."}]
    r = assay.rows([a, b], ["x", "y"])
    assert r[0]["prompt"] == r[1]["prompt"] == "Continue."
    assert r[0]["task_id"] != r[1]["task_id"]
    assert r[0]["messages"] == a
    # a plain string prompt is the same task as the one-message conversation
    assert assay.rows(["Hi"], ["x"])[0]["task_id"] == \
        task_id_for([{"role": "user", "content": "Hi"}])


def test_same_prompt_twice_is_one_task_with_continuous_rollouts():
    r = assay.rows(["Q", "Q"], [["a", "b"], ["c"]])
    assert len({x["task_id"] for x in r}) == 1
    assert [x["rollout_index"] for x in r] == [0, 1, 2]


def test_flat_rewards_and_task_ids():
    r = assay.rows(["a", "b"], [["x", "y"], ["z"]], [1, 0, 0.5], task_ids=["t1", "t2"])
    assert [x["reward"] for x in r] == [1.0, 0.0, 0.5]
    assert [x["task_id"] for x in r] == ["t1", "t1", "t2"]


def test_judge_contract_callable_with_markers_and_reason():
    def judge(row):
        return {"reward": float(row["final_text"] == "5"), "reason": "checked",
                "markers": {"len": len(row["final_text"])}}
    r = assay.rows(["2+3?"], [["5", "55"]], judge)
    assert [x["reward"] for x in r] == [1.0, 0.0]
    assert r[1]["markers"] == {"len": 2.0} and r[1]["reason"] == "checked"


@pytest.mark.parametrize("ret,status", [(float("nan"), "invalid_result"), (1.5, "invalid_result"),
                                        (-0.1, "invalid_result"), ("1", "invalid_result"),
                                        (None, "no_verdict")])
def test_bad_judge_results_never_pass(ret, status):
    r = assay.rows(["q"], ["a"], lambda p, c: ret)
    assert r[0]["reward"] is None and r[0]["judge_status"] == status and r[0]["reason"]


def test_raising_judge_is_an_error_row_not_a_crash():
    def boom(p, c):
        raise ZeroDivisionError("nope")
    r = assay.rows(["q"], ["a"], boom)
    assert r[0]["reward"] is None and r[0]["judge_status"] == "error" \
        and "ZeroDivisionError" in r[0]["reason"]


def test_verifier_without_reference_is_no_reference():
    class V(assay.judging.Verifier):
        name = "v"
        def check(self, candidate, reference, row):
            return 1.0
    r = assay.rows(["q"], ["a"], V())
    assert r[0]["judge_status"] == "no_reference" and r[0]["reward"] is None


# ---- bad input: every case names the argument and the indices ---------------------------------

@pytest.mark.parametrize("completions,exc,pattern", [
    ([None, "x"], RowsTypeError, r"completions\[0\] is None"),
    (["x", ["a", None]], RowsTypeError,
     r"completions\[1\]\[1\] \(prompt 1, completion 1\) is None"),
    (["x", ["a", 3]], RowsTypeError, r"completions\[1\]\[1\].*int"),
    (["x"], RowsError, r"1 entries for 2 prompts"),
    (["x", []], RowsError, r"completions\[1\] is empty"),
])
def test_bad_completions(completions, exc, pattern):
    with pytest.raises(exc, match=pattern):
        assay.rows(["p0", "p1"], completions)


@pytest.mark.parametrize("reward,exc,pattern", [
    ([[1, 0], [2]], RowsError, r"prompt 1, completion 0.*outside \[0.0, 1.0\]"),
    ([[1, float("nan")], [1]], RowsError, r"prompt 0, completion 1.*NaN"),
    ([[1, "1"], [1]], RowsTypeError, r"prompt 0, completion 1.*must be a number"),
    ([[1, 0, 1], [1]], RowsError, r"reward\[0\]: 3 values for prompt 0's 2 completions"),
    ([1, 0], RowsError, r"2 values for 2 prompts with 3 completions"),
    (lambda a, b, c, d: 1, RowsTypeError, r"takes 4 required positional arguments"),
    ("yes", RowsTypeError, r"reward: expected a verifier"),
])
def test_bad_rewards(reward, exc, pattern):
    with pytest.raises(exc, match=pattern):
        assay.rows(["p0", "p1"], [["a", "b"], ["c"]], reward)


def test_numpy_nan_reward_rejected():
    with pytest.raises(RowsError, match="NaN"):
        assay.rows(["p"], [["a", "b"]], np.array([1.0, np.nan]))


@pytest.mark.parametrize("markers,pattern", [
    ([[{"x": "long"}, {}], [{}]], r"prompt 0, completion 0.*marker 'x' must be a number"),
    ([[{"x": float("nan")}, {}], [{}]], r"prompt 0, completion 0.*NaN"),
    ([[{}, {"x": None}], [{}]], r"prompt 0, completion 1.*omit the key"),
    ([[{}, ["x"]], [{}]], r"prompt 0, completion 1.*must be a dict"),
])
def test_bad_markers(markers, pattern):
    with pytest.raises((RowsError, RowsTypeError), match=pattern):
        assay.rows(["p0", "p1"], [["a", "b"], ["c"]], markers=markers)


@pytest.mark.parametrize("prompts,pattern", [
    ("just a string", r"prompts: expected a sequence"),
    ([None], r"prompts\[0\] is None"),
    ([[{"role": "system", "content": "x"}]], r"prompts\[0\] has no message with role 'user'"),
    ([[{"role": "user", "text": "x"}]], r"prompts\[0\]\[0\]"),
    ([[{"role": "user", "content": 3}]], r"prompts\[0\]\[0\]"),
])
def test_bad_prompts(prompts, pattern):
    with pytest.raises((RowsError, RowsTypeError), match=pattern):
        assay.rows(prompts, ["x"] * (1 if not isinstance(prompts, str) else 13))


def test_bad_references_and_task_ids():
    with pytest.raises(RowsError, match="references: expected one reference per prompt"):
        assay.rows(["a", "b"], ["x", "y"], references=["only one"])
    with pytest.raises(RowsTypeError, match=r"task_ids\[1\]"):
        assay.rows(["a", "b"], ["x", "y"], task_ids=["t", 7])


def test_none_is_never_the_text_none():
    with pytest.raises(RowsTypeError, match="never the text 'None'"):
        as_table([{"prompt": "q", "final_text": None}])


# ---- every measurement input form ----------------------------------------------------------------

def _forms(r):
    return [r, list(r), r.to_pandas(), r.to_arrow()]


def test_as_table_accepts_all_input_forms_identically():
    r = assay.rows(QUESTIONS, ANSWERS, SCORES,
                   markers=[[{"c": len(a)} for a in g] for g in ANSWERS])
    tables = [as_table(f, require=("reward",)) for f in _forms(r)]
    for t in tables:
        assert t.schema == ROW_SCHEMA
        assert t.equals(r.to_arrow())


def test_loose_rows_get_default_task_ids_and_rollouts():
    t = as_table([{"prompt": "q", "final_text": "a", "reward": 1},
                  {"prompt": "q", "final_text": "b", "reward": 0},
                  {"prompt": "r", "final_text": "c", "reward": 1}], require=("reward",))
    tids = t.column("task_id").to_pylist()
    assert tids[0] == tids[1] != tids[2]
    assert t.column("rollout_index").to_pylist() == [0, 1, 0]


@pytest.mark.parametrize("bad,pattern", [
    ([{"prompt": "q", "final_text": "a", "reward": float("nan")}], r"rows\[0\].*NaN"),
    ([{"prompt": "q", "final_text": "a", "reward": 1},
      {"prompt": "q", "final_text": "a", "reward": 1.2}], r"rows\[1\]"),
    ([{"prompt": "q", "final_text": "a", "reward": 1, "task_id": 3}], r"rows\[0\].*integer"),
    ([{"prompt": "q", "final_text": "a", "score": 1}], r"unknown row keys \['score'\]"),
    ([{"prompt": "q", "final_text": "a"}], r"required key 'reward'"),
])
def test_as_table_errors_name_the_row(bad, pattern):
    with pytest.raises((RowsError, RowsTypeError), match=pattern):
        as_table(bad, require=("reward",))


def test_dataframe_nan_reward_is_an_error_not_unjudged():
    df = pd.DataFrame({"prompt": ["q", "q"], "final_text": ["a", "b"], "reward": [1.0, math.nan]})
    with pytest.raises(RowsError, match=r"rows\[1\].*NaN"):
        as_table(df, require=("reward",))


MEASURED = ("task_id", "reward", "markers")


def test_projected_read_equals_the_full_read_on_every_input_form():
    r = _rich_rows()
    loose = [{"prompt": "q", "final_text": "a", "reward": 1, "markers": {"m": 2}, "messages": None},
             {"prompt": "q", "final_text": "", "reward": 0, "messages": None},
             {"prompt": "", "final_text": "b", "messages": [{"role": "user", "content": "hi"}],
              "reward": None}]
    # NaN is an error
    judged = pd.DataFrame([dict(x, reward=1.0 if x["reward"] is None else x["reward"])
                           for x in loose])
    for f in [*_forms(r), loose, judged]:
        full = as_table(f, require=())
        part = as_table(f, require=(), columns=MEASURED)
        canonical = isinstance(f, Rows) or (isinstance(f, pa.Table) and f.schema == ROW_SCHEMA)
        # whole: zero-copy
        assert part.column_names == (list(ROW_SCHEMA.names) if canonical else list(MEASURED))
        for c in MEASURED:
            assert part.column(c).equals(full.column(c)), c
    assert as_table(loose[:2], require=("reward",),
                    columns=("markers",)).column_names == ["reward", "markers"]


def test_projected_read_checks_what_it_reads_and_every_key():
    ok = {"task_id": "t", "reward": 1}
    for bad, pattern in [
        ([ok, dict(ok, reward=float("nan"))], r"rows\[1\].*NaN"),
        ([ok, dict(ok, task_id=3)], r"rows\[1\].*integer"),
        ([ok, dict(ok, markers={"m": None})], r"rows\[1\].*marker 'm' is None"),
        ([ok, dict(ok, markers={"m": "x"})], r"rows\[1\].*must be a number"),
        ([ok, dict(ok, score=1)], r"unknown row keys \['score'\]"),
        # for its task id
        ([dict(ok, prompt="q"), {"reward": 1, "prompt": None}], r"rows\[1\].*'prompt' is None"),
        ([ok, {"reward": 1}], r"rows\[1\]: no 'task_id'"),
    ]:
        with pytest.raises((RowsError, RowsTypeError), match=pattern):
            as_table(bad, require=(), columns=MEASURED)
    # a column the measurement never reads is not its business (select reads it, and checks it)
    t = as_table([dict(ok, privileged="not a dict", final_text=5)], require=(), columns=MEASURED)
    assert t.column("task_id").to_pylist() == ["t"]
    with pytest.raises(RowsTypeError, match="privileged"):
        as_table([dict(ok, privileged="not a dict")], require=())
    with pytest.raises(ValueError, match="not in ROW_SCHEMA"):
        as_table([ok], columns=("score",))


def test_markers_fast_path_equals_the_per_row_conversion():
    from assay.rows import MARKERS_TYPE, _fast_markers

    rng = np.random.default_rng(5)
    names = ["len", "a", "\u00e9", ""]
    for _ in range(2000):
        base = [str(x) for x in rng.choice(names, size=int(rng.integers(0, 4)), replace=False)]
        same = rng.random() < 0.6
        vals = []
        for _ in range(int(rng.integers(0, 8))):
            if rng.random() < 0.1:
                vals.append(None)
                continue
            keys = base if same else [str(x) for x in rng.choice(
                names, size=int(rng.integers(0, 4)), replace=False)]
            pick = [True, 1, float("nan"), None, 0.5, -2.5, float("inf")]
            vals.append({k: pick[int(rng.integers(len(pick)))] if rng.random() < 0.4
                         else float(rng.random())
                         for k in keys})
        fast = _fast_markers(vals)
        try:  # the reference: Arrow's own conversion of the dicts, row by row semantics
            ref = pa.array([m or {} for m in vals], type=MARKERS_TYPE, from_pandas=False)
            finite = np.isfinite(ref.items.to_numpy(zero_copy_only=False))
            ref = ref if not ref.items.null_count and finite.all() else None
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            ref = None
        assert (fast is None) == (ref is None), vals
        assert fast is None or fast.equals(ref), vals


# ---- round trips and checksum --------------------------------------------------------------------

def _rich_rows():
    conv = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Caf\u00e9 \u4e2d\u6587?"}]
    return assay.rows(
        [conv, "plain"], [["x", "y"], ["z"]], [[1, None], [0.25]],
        references=[{"test": "assert f(1)==2", "entry_point": "f"}, ["a", 1, None]],
        markers=[[{"m": 1.5}, {}], [{"m": -3, "n": 2}]],
    )


def test_round_trips_are_lossless(tmp_path):
    r = _rich_rows()
    assert Rows.from_arrow(r.to_arrow()) == r
    assert Rows.from_pandas(r.to_pandas()) == r
    assert Rows.from_records(list(r)) == r
    p = tmp_path / "rows.parquet"
    r.to_parquet(p)
    back = Rows.read_parquet(p)
    assert back == r and list(back) == list(r)
    assert back.checksum() == r.checksum()
    assert r[0]["privileged"] == {"reference": {"test": "assert f(1)==2", "entry_point": "f"}}
    assert r[1]["reward"] is None and r[1]["judge_status"] == "unjudged"


def test_checksum_is_content_sensitive_and_cached():
    r = _rich_rows()
    c = r.checksum()
    assert c.startswith("rows:") and r.checksum() is c
    other = assay.rows(["plain"], ["z"], [0.25])
    assert other.checksum() != c
    changed = Rows.from_records([dict(x, final_text=x["final_text"] + "!") if i == 2 else x
                                 for i, x in enumerate(r)])
    assert changed.checksum() != c
    reordered = Rows.from_records(list(r)[::-1])
    assert reordered.checksum() != c


def test_rows_slicing_and_repr():
    r = assay.rows(QUESTIONS, ANSWERS, SCORES)
    assert isinstance(r[2:5], Rows) and len(r[2:5]) == 3 and r[2:5][0] == r[2]
    assert r[-1] == r[15]
    assert repr(r) == "Rows(n=16, tasks=4, judged=16)"
    with pytest.raises(IndexError):
        r[16]


def test_rows_is_immutable():
    r = assay.rows(["q"], ["a"], [1])
    row = r[0]
    row["reward"] = 0.0
    assert r.to_arrow().column("reward").to_pylist() == [1.0]
    assert isinstance(r.to_arrow(), pa.Table)


def test_every_public_lazy_name_resolves():
    code = ("import sys, assay\n"
            "names = sorted(assay._LAZY) + sorted(assay._SUBMODULES - {'reward'})\n"
            "missing = [n for n in names if getattr(assay, n, None) is None]\n"
            "print(missing, 'torch' in sys.modules, 'prefect' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # the reward module's models load torch lazily, on construction, never on import
    assert out.stdout.split("]")[0] == "[", out.stdout
    assert out.stdout.strip().endswith("False False"), out.stdout


def test_core_library_source_never_imports_prefect():
    """The architecture's rule, checked on the source (a lazy import inside a function would
    pass the import test above): Prefect belongs to tasks/ and flows/."""
    import ast
    from pathlib import Path

    root = Path(assay.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.relative_to(root)}:{node.lineno}" for n in names
                          if n == "prefect" or n.startswith("prefect.") or n.startswith("prefect_")]
    assert not offenders, offenders


def test_json_fields_match_the_standard_encoder_and_reject_circular_values():
    import json

    from assay.errors import RowsError
    from assay.rows import to_json

    ref = json.JSONEncoder(ensure_ascii=False, sort_keys=True, allow_nan=False).encode
    for v in [{"b": [1, 2.5, None, "é\u2028"], "a": {"z": True, "y": -0.0}}, "x", 3, [], {},
              1e300]:
        assert to_json(v, "f") == ref(v)
    loop: list = []
    loop.append(loop)
    with pytest.raises(RowsError, match=r"privileged\[3\].*circular"):
        to_json(loop, "privileged[3]")
    with pytest.raises(RowsError, match="not JSON-serializable"):
        to_json({"a": float("nan")}, "f")
    with pytest.raises(RowsError, match="not JSON-serializable"):
        to_json({"a": object()}, "f")

"""The page's data: task flags and pass counts against a brute-force reading of the rows, the
moved-task order, and the escaping that keeps row text inert in a script."""

from __future__ import annotations

import json
import random

import pyarrow as pa

import assay
from assay.view.compare import moved_tasks
from assay.view.data import FLAGS, TASK_COLUMNS, js_call, safe_json, task_docs, task_line


def _table() -> pa.Table:
    """Six tasks of three rows with every kind of row the page flags."""
    rng = random.Random(3)
    prompts, comps, rewards, markers = [], [], [], []
    for t in range(6):
        prompts.append(f"q{t}")
        comps.append([f"a{t}{j}" for j in range(3)])
        rewards.append([float(rng.random() < 0.5) for _ in range(3)])
        markers.append([{"truncated": 1.0} if (t, j) == (1, 2) else {} for j in range(3)])
    t = assay.rows(prompts, comps, rewards, task_ids=[f"t{i}" for i in range(6)],
                   markers=markers).to_arrow()
    status = t.column("judge_status").to_pylist()
    reward = t.column("reward").to_pylist()
    meta = t.column("judge_meta").to_pylist()
    status[6], reward[6] = "gen_error", None      # task 2: a failed request
    status[9], reward[9] = "unjudged", None       # task 3: no judge ran
    meta[12] = json.dumps({"guard": "plain_data"})  # task 4: stopped by a grading guard
    reward[15:18] = [0.5, 1.0, 0.0]               # task 5: a partial reward
    for name, col, typ in (("judge_status", status, pa.string()), ("reward", reward, pa.float64()),
                           ("judge_meta", meta, pa.string())):
        t = t.set_column(t.column_names.index(name), name, pa.array(col, typ))
    return t


def test_task_lines_match_the_rows() -> None:
    table = _table()
    rows = table.to_pylist()
    for doc in task_docs(table):
        line = dict(zip(TASK_COLUMNS, task_line(doc, [])))
        mine = [r for r in rows if r["task_id"] == doc["id"]]
        binary = [r["reward"] for r in mine if r["reward"] in (0.0, 1.0)]
        assert (line["n_pass"], line["n_binary"]) == (sum(binary), len(binary))
        want = {
            "failed": bool(binary) and sum(binary) < len(binary),
            "passed": bool(binary) and sum(binary) == len(binary),
            "truncated": any(dict(r["markers"]).get("truncated") for r in mine),
            "gen_error": any(r["judge_status"] == "gen_error" for r in mine),
            "unjudged": any(r["reward"] is None and r["judge_status"] != "gen_error" for r in mine),
            "guard": any(r["judge_meta"] and "guard" in json.loads(r["judge_meta"]) for r in mine)}
        got = {f: bool(line["flags"] & bit) for f, bit in FLAGS.items()}
        assert got == want, doc["id"]
    flagged = {d["id"]: task_line(d, [])[5] for d in task_docs(table)}
    assert flagged["t1"] & FLAGS["truncated"] and flagged["t2"] & FLAGS["gen_error"]
    assert flagged["t3"] & FLAGS["unjudged"] and flagged["t4"] & FLAGS["guard"]


def test_moved_tasks_brute_force() -> None:
    rng = random.Random(7)

    def night() -> list[dict]:
        return [{"id": f"t{i}", "rows": [{"reward": float(rng.random() < 0.5)} for _ in range(4)]}
                for i in range(40)]

    a, b = night(), night()
    moved = moved_tasks(a, b)
    rate = {(n, t["id"]): sum(r["reward"] for r in t["rows"]) / 4 for n, ts in (("a", a), ("b", b))
            for t in ts}
    want = [i for i in (f"t{k}" for k in range(40)) if rate["a", i] != rate["b", i]]
    assert sorted(m["id"] for m in moved) == sorted(want)
    deltas = [abs(m["delta"]) for m in moved]
    assert deltas == sorted(deltas, reverse=True)
    for m in moved:
        before, after = rate["a", m["id"]], rate["b", m["id"]]
        up, down = before == 0 < after, after == 0 < before
        assert m["flip"] == ("fail->pass" if up else "pass->fail" if down else "")


def test_escaping_round_trips_and_is_inert() -> None:
    nasty = {"t": "</script><!-- <img src=x onerror=alert(1)> & \u2028\u2029 \"'\\",
             "n": [1.5, None]}
    text = safe_json(nasty)
    assert text.isascii() and not any(c in text for c in "<>&")
    assert json.loads(text) == nasty
    call = js_call("rows:0:0", nasty)
    assert call.startswith('assayData("rows:0:0",') and json.loads(call[21:-3]) == nasty


def test_the_headline_is_each_sources_pass_at_1_as_report_json_states_it() -> None:
    import assay
    from assay.report import result_doc
    from assay.view.compare import headline

    r = assay.rows(["a", "b", "c"], [["x", "y"], ["x", "x"], ["y", "y"]], [[1, 0], [1, 1], [0, 0]])
    got = assay.pass_at(r, k=2)
    docs = [result_doc("pass_at", "pass_at[m]", got, source="m"),
            result_doc("eval_variance", "eval_variance[m]", assay.eval_variance(r), source="v")]
    one = next(e for e in docs[0]["estimates"] if e["name"].startswith("pass@1"))
    assert headline({"measurements": docs}) == {
        "m": {k: one[k] for k in ("name", "value", "low", "high", "n")}}
    assert one["value"] == 0.5 and one["n"] == 3  # (1/2 + 1 + 0) / 3 tasks
    assert headline(None) == {} and headline({"measurements": docs[1:]}) == {}

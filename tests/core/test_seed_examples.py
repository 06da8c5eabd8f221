"""The seed document's rows() examples run with `import assay` and give the rows it describes."""

import assay

QUESTIONS = ["What is 2 + 3?", "What is 7 * 6?", "What is 10 - 4?", "What is 9 / 3?"]
GOLD = ["5", "42", "6", "3"]
ANSWERS = [["5", "4", "5", "5"], ["41", "41", "42", "40"], ["6"] * 4, ["3", "2", "3", "3"]]


def test_math_equal_example_end_to_end():
    rows = assay.rows(QUESTIONS, ANSWERS, assay.verify.MathEqual(), references=GOLD)
    assert rows[0]["task_id"].startswith("task:") and rows[0]["reward"] == 1.0
    assert rows[0]["judge_name"] == "MathEqual"
    expected = [float(a == g) for group, g in zip(ANSWERS, GOLD) for a in group]
    assert [r["reward"] for r in rows] == expected
    assert {r["judge_status"] for r in rows} == {"ok"}

    tuned = assay.rows(QUESTIONS, [["5"] * 4, ["42", "42", "42", "41"], ["6"] * 4, ["3"] * 4],
                       assay.verify.MathEqual(), references=GOLD)
    p = assay.pass_at(rows)
    line = str(p)
    assert line.startswith("pass@1 0.688 [") and "(4 tasks, 16 rows)" in line
    sel = assay.select(rows, mode="rl", band=(0.2, 0.8))
    kept_tasks = {r["task_id"] for r in sel.rows}
    # tasks with pass rates 0.75, 0.25, 1.0, 0.75: only the all-pass task leaves the band
    assert kept_tasks == {rows[i * 4]["task_id"] for i in (0, 1, 3)}
    c = assay.compare(rows, tuned)
    assert "4 paired tasks" in str(c)


def test_given_scores_and_markers_example():
    scores = [[1, 0, 1, 1], [0, 0, 1, 0], [1, 1, 1, 1], [1, 0, 1, 1]]
    lengths = [[{"chars": len(a)} for a in group] for group in ANSWERS]
    given = assay.rows(QUESTIONS, ANSWERS, scores, markers=lengths)
    assert given[1]["reward"] == 0.0 and given[1]["markers"] == {"chars": 1.0}
    assert str(assay.pass_at(given)).startswith("pass@1 0.688")

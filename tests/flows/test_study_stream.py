"""Generation streams into grading under the Prefect flow too (its local task runner calls the
stages on threads of this process, with the parameters Prefect hands them): the server holds
the last prompt of the only shard until the verifier's log shows another prompt of that shard
graded, which only grading ahead can do, and every row is graded once; run.json says how many
rows were graded ahead."""

from __future__ import annotations

import json
import time
from pathlib import Path

from helpers import logged_grader
from helpers.openai_server import OpenAIServer, scripted_policy, served_source


def test_the_flow_grades_finished_prompts_while_the_shard_generates(
        prefect_server: str, tmp_path: Path) -> None:
    from assay.flows.study import run_spec

    log = tmp_path / "graded.log"
    held: list[bool] = []
    end = [0.0]

    def policy(body: dict) -> str:
        if "What is 3 + 3?" in body["messages"][-1]["content"]:
            end[0] = end[0] or time.monotonic() + 120  # one bound for both samples
            while time.monotonic() < end[0] and not logged_grader.graded(log):
                time.sleep(0.02)
            held.append(time.monotonic() < end[0])
        return scripted_policy(body)

    srv = OpenAIServer(["m"], policy=policy).start()
    (tmp_path / "logged_grader.py").write_text(logged_grader.SOURCE)
    (tmp_path / "a.jsonl").write_text("".join(
        json.dumps({"id": f"t{i}", "q": f"What is {i} + {i}?", "gold": str(2 * i)}) + "\n"
        for i in range(4)))
    verifier = ('{{kind: function, function: "logged_grader:grade", params: {{log: "'
                + str(log) + '"}}}}')
    spec = ("name: flowstream\nsources:\n" + served_source(4, verifier)
            + "measure: {{pass_at: {{k: 2}}}}\n").format(url=srv.base_url)
    (tmp_path / "spec.yaml").write_text(spec)
    try:
        run_spec(str(tmp_path / "spec.yaml"), str(tmp_path / "out"), str(tmp_path / "store"))
    finally:
        srv.stop()
    assert held == [True, True], held
    counts = logged_grader.graded(log)
    assert len(counts) == 8 and set(counts.values()) == {1}, counts
    ahead = json.loads((tmp_path / "out" / "run.json").read_text())["graded_ahead"]
    assert ahead["rows"] >= 1 and ahead["used"] == ahead["rows"], ahead  # a fact of the run

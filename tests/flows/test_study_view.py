"""Every run writes its page (RUN/view/index.html), report.md links to it and the flow publishes
a link artifact; ``view=False`` (``assay run --no-view``) and ``execution.view: false`` turn it off.
Slow: a real Prefect server and three study runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.specs import exact_match_study

SPEC = exact_match_study("viewtest", k=2, execution="shard_rows: 8VIEW")


def write_study(tmp: Path, view: str = "") -> Path:
    with open(tmp / "a.jsonl", "w") as f:
        for i in range(6):
            for j in range(2):
                gold = str(i * 7)
                f.write(json.dumps({"id": f"t{i}", "q": f"What is 7 * {i}?", "gold": gold,
                                    "c": gold if (i + j) % 3 else "no"}) + "\n")
    p = tmp / f"spec{view.strip(', :').replace(' ', '')}.yaml"
    p.write_text(SPEC.replace("VIEW", view))
    return p


@pytest.mark.slow
def test_run_writes_the_page_and_links_it(prefect_server: str, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client

    from assay.flows.study import run_spec

    spec = write_study(tmp_path)
    run_spec(str(spec), str(tmp_path / "run1"), str(tmp_path / "store"), embedded=True)
    page = tmp_path / "run1" / "view" / "index.html"
    assert page.is_file() and (page.parent / "data" / "s0-tasks.js").is_file()
    assert "[view/index.html](view/index.html)" in (tmp_path / "run1" / "report.md").read_text()
    with get_client(sync_client=True) as client:
        links = [a for a in client.read_artifacts() if a.key == "viewtest-view"]
    assert links and page.resolve().as_uri() in str(links[0].data), [a.data for a in links]

    run_spec(str(spec), str(tmp_path / "run2"), str(tmp_path / "store"), embedded=True, view=False)
    assert (tmp_path / "run2" / "report.md").is_file()
    assert not (tmp_path / "run2" / "view").exists()
    off = write_study(tmp_path, ", view: false")
    run_spec(str(off), str(tmp_path / "run3"), str(tmp_path / "store"), embedded=True)
    assert (tmp_path / "run3" / "report.md").is_file()
    assert not (tmp_path / "run3" / "view").exists()

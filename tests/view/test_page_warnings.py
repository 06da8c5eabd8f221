"""The page shows every warning of the report beside the number it qualifies (issue 47: "96%
truncated" was only in report.md), and a source nothing could judge with its reasons.

A real run (file sources, run_study, the run directory as `assay run` writes it), opened in
headless Chromium; skips without chromium/chromedriver (fails under CI, like test_page.py).
"""

from __future__ import annotations

import json
import os
import re
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from view.browser import chromium_paths, page_url, start_browser

from assay import stages
from assay.spec import load_spec
from assay.stages.finish import finish_run
from assay.store import Store
from assay.view import write_view


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("warn")
    mod = f"nangrade_{uuid.uuid4().hex[:8]}"
    (tmp / f"{mod}.py").write_text(textwrap.dedent("""
        def grade(completion, reference):
            return float("nan")
    """))
    with open(tmp / "a.jsonl", "w") as f:
        for t in range(6):  # 6 tasks (a small-sample warning), 23 of 24 rows truncated
            for j in range(4):
                f.write(json.dumps({"id": f"t{t}", "q": f"{t} + 1?", "gold": str(t + 1),
                                    "a": str(t + 1) if j % 2 else "x",
                                    "cut": 0 if (t, j) == (0, 0) else 1}) + "\n")
    (tmp / "s.yaml").write_text(f"""
name: warned
sources:
  - name: cut
    kind: file
    path: a.jsonl
    fields: {{prompt: q, completion: a, reference: gold, task_id: id,
              markers: {{truncated: cut}}}}
    verifier: {{kind: exact_match}}
  - name: nan
    kind: file
    path: a.jsonl
    fields: {{prompt: q, completion: a, reference: gold, task_id: id}}
    verifier: {{kind: function, function: "{mod}:grade"}}
measure: {{pass_at: {{k: 4}}, eval_variance: {{}}}}
""")
    spec = load_spec(tmp / "s.yaml")
    store = Store(tmp / "st")
    r = stages.run_study(spec, store, progress=None, workers=1)
    finish_run(store, spec, r, tmp / "out")
    write_view(tmp / "out")
    return tmp / "out"


@pytest.fixture(scope="module")
def browser() -> Any:
    if chromium_paths() is None:
        if os.environ.get("CI"):
            pytest.fail("CI: chromium and chromedriver are missing")
        pytest.skip("chromium/chromedriver not installed")
    driver = start_browser()
    yield driver
    driver.quit()


def _report_warnings(run: Path) -> dict[str, list[str]]:
    """Per measurement (report.md's ### heading), its "warning:" lines, read from report.md."""
    out: dict[str, list[str]] = {}
    label = None
    for line in (run / "report.md").read_text().splitlines():
        if line.startswith("### "):
            label = line[4:]
        m = re.match(r"^\s*warning:\s*(.+)$", line)
        if m and label:
            out.setdefault(label, []).append(m.group(1))
    return out


def test_every_report_warning_is_beside_its_measurement(run: Path, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    want = _report_warnings(run)
    assert any("truncated" in w for w in want["pass_at[cut]"])  # the case of the issue
    browser.get(page_url(run / "view" / "index.html", "overview"))
    heads = browser.find_elements(By.CSS_SELECTOR, "section h3")
    shown: dict[str, list[str]] = {}
    for h in heads:
        nxt = h.find_elements(By.XPATH, "following-sibling::*[1]")
        if nxt and nxt[0].tag_name == "ul" and "warnings" in nxt[0].get_attribute("class"):
            shown[h.text] = [li.text for li in nxt[0].find_elements(By.TAG_NAME, "li")]
    for label, ws in want.items():
        assert shown.get(label) == ws, label


def test_the_sources_table_marks_warned_numbers_and_nothing_judged(run: Path,
                                                                  browser: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get(page_url(run / "view" / "index.html", "overview"))
    rows = {r.find_elements(By.TAG_NAME, "td")[0].text: [c.text for c in
                                                         r.find_elements(By.TAG_NAME, "td")]
            for r in browser.find_elements(By.CSS_SELECTOR, "table.sources tbody tr")}
    report = json.loads((run / "report.json").read_text())
    n_warn = len(next(m for m in report["measurements"] if m["label"] == "pass_at[cut]")
                 ["data"]["warnings"])
    assert rows["cut"][4].endswith(f"\u26a0 {n_warn} warning" + "s" * (n_warn > 1))
    assert rows["nan"][4].startswith("-") and "\u26a0 1 warning" in rows["nan"][4]
    page = browser.find_element(By.TAG_NAME, "main").text
    assert "nan: 24 of 24 rows unjudged (no reward; left out of the measurements); top " \
           "reasons: invalid_result: judge returned NaN (24)" in page
    assert "not measured: no row of nan was judged (24 rows; invalid_result: judge returned " \
           "NaN (24))" in page

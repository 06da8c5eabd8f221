"""The page of a real run, opened from the file system in headless Chromium: the counts it shows
against report.json and the rows, a filter, a search, a task, the diff and the nightly gate, and
that no planted script, handler or javascript: link in the rows ever runs.

Needs the Debian packages chromium and chromium-driver (``.ci/run`` installs them). Without them
the tests skip, except under CI, where they fail.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from view.browser import chromium_paths, page_url, start_browser
from view.runs import PAYLOADS, make_run, records

from assay.cli import main
from assay.nightly.gates import evaluate_night
from assay.nightly.spec import NightlySpec
from assay.view import write_view

#: Where the screenshots are kept (look at them): runs/view-screenshots unless set.
SHOTS = Path(os.environ.get("ASSAY_SCREENSHOTS",
                            Path(__file__).parents[2] / "runs" / "view-screenshots"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two nights of one study (the second model worse), gated as `assay nightly` gates them."""
    base = tmp_path_factory.mktemp("view")
    root = base / "nightly" / "view-demo"
    out = {}
    nights = (("2026-11-01", records(seed=0)), ("2026-11-02", records(seed=1, worse=0.35)))
    for night, recs in nights:
        run = make_run(base / "work", night, recs)
        dest = root / night
        shutil.copytree(run, dest)
        info = json.loads((dest / "run.json").read_text())
        doc = evaluate_night(dest, study="view-demo", night=night, sources=["model"],
                             gates=NightlySpec(), spec_definition=info["spec_definition"])
        (dest / "nightly.json").write_text(json.dumps(doc))
        out[night] = dest
    out["root"] = root
    return out


@pytest.fixture(scope="module")
def browser() -> Any:
    if chromium_paths() is None:
        if os.environ.get("CI"):
            pytest.fail("CI: chromium and chromedriver are missing; .ci/run must install them "
                        "(apt-get install -y chromium chromium-driver)")
        pytest.skip("chromium/chromedriver not installed "
                    "(apt-get install -y chromium chromium-driver)")
    driver = start_browser()
    yield driver
    driver.quit()


def wait(driver: Any, cond: Any, what: str, timeout: float = 20) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(cond, message=f"page never showed {what}")


def css(driver: Any, sel: str) -> Any:
    from selenium.webdriver.common.by import By

    return wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, sel), sel)


def applied(driver: Any) -> int:
    return int(driver.execute_script("return Number(document.body.dataset.applied || 0)"))


def change(driver: Any, action: Any) -> None:
    """Do ``action`` (a filter change) and wait until the list is redrawn after it."""
    before = applied(driver)
    action()
    wait(driver, lambda d: applied(d) > before, "the list redrawn")


def shot(driver: Any, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    p = SHOTS / f"{name}.png"
    driver.save_screenshot(str(p))
    return p


def no_injection(driver: Any) -> None:
    """Nothing planted ran, and no element came from row text."""
    assert driver.execute_script("return window.__pwned === undefined"), \
        driver.execute_script("return String(window.__pwned)")
    scripts = driver.execute_script(
        "return [...document.scripts].map(s => s.getAttribute('src'))")
    assert all(s == "app.js" or (s or "").startswith("data/") for s in scripts), scripts
    bad = driver.execute_script(
        "return document.querySelectorAll('#main script, #main svg:not(.chart), #main iframe,"
        " #main img:not(figure img), a[href^=\"javascript\"], #evil-link, [onerror],"
        " [onload]').length")
    assert bad == 0


def task_table(run: Path) -> pd.DataFrame:
    """Per task: samples passed and taken, from the rows Parquet (the independent count)."""
    df = pd.read_parquet(run / "rows" / "model.parquet")
    df["topic"] = df["meta"].map(lambda m: json.loads(m)["topic"])
    g = df.groupby("task_id")
    text = g.apply(lambda x: "\n".join([x["prompt"].iloc[0], *x["final_text"]]).lower(),
                   include_groups=False)
    return pd.DataFrame({"n_pass": g["reward"].sum(), "n": g["reward"].size(),
                         "topic": g["topic"].first(), "text": text})


def test_overview_and_samples_match_report_and_rows(runs: dict[str, Path], browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    run = runs["2026-11-01"]
    page = write_view(run)
    report = json.loads((run / "report.json").read_text())
    src = report["sources"][0]
    p1 = next(e for m in report["measurements"] if m["kind"] == "pass_at" for e in m["estimates"]
              if e["name"] == "pass@1")
    browser.get(page_url(page, "overview"))
    row = css(browser, "table.sources tbody tr")
    cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
    assert cells[:4] == ["model", str(src["tasks"]), str(src["rows"]), src["verifier"]]
    assert cells[4:7] == [f"{p1['value']:.3f}", f"[{p1['low']:.3f}, {p1['high']:.3f}]",
                          str(p1["n"])]
    assert browser.find_elements(By.CSS_SELECTOR, ".plots img")  # the report's plots, copied
    shot(browser, "overview")
    no_injection(browser)

    tasks = task_table(run)
    browser.get(page_url(page, "samples/0"))
    wait(browser, lambda d: applied(d) > 0, "the task list")
    assert css(browser, "#n-tasks").text == str(src["tasks"]) == str(len(tasks))
    assert len(browser.find_elements(By.CSS_SELECTOR, "tr.task-row")) == min(100, len(tasks))
    status = Select(css(browser, "#f-status"))
    change(browser, lambda: status.select_by_value("nonepass"))
    want = int((tasks.n_pass == 0).sum())
    assert 0 < want < len(tasks)
    assert css(browser, "#n-shown").text == str(want)
    change(browser, lambda: Select(css(browser, "#f-category")).select_by_value("counting"))
    want = int(((tasks.n_pass == 0) & (tasks.topic == "counting")).sum())
    assert css(browser, "#n-shown").text == str(want)
    assert len(browser.find_elements(By.CSS_SELECTOR, "tr.task-row")) == want
    change(browser, lambda: Select(css(browser, "#f-category")).select_by_value(""))
    change(browser, lambda: status.select_by_value("all"))
    # search reads completions too: "onerror" is in task 3's prompt and in task 5's answers
    change(browser, lambda: css(browser, "#f-q").send_keys("window.__pwned = 'img'"))
    wait(browser, lambda d: css(d, "#search-status").text == "", "the search finished")
    want = int(tasks.text.str.contains("window.__pwned = 'img'", regex=False).sum())
    assert css(browser, "#n-shown").text == str(want) and want >= 2
    shot(browser, "samples-search")
    no_injection(browser)


def test_task_page_shows_every_completion_as_text(runs: dict[str, Path], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    run = runs["2026-11-01"]
    page = write_view(run)
    browser.get(page_url(page, "samples/0"))
    wait(browser, lambda d: applied(d) > 0, "the task list")
    css(browser, 'tr.task-row[data-task="q-005"]').click()
    box = css(browser, "#task-page")
    cards = box.find_elements(By.CSS_SELECTOR, ".completion")
    assert len(cards) == 4
    assert [c.find_element(By.CSS_SELECTOR, ".verdict").text for c in cards] == ["FAIL"] * 4
    for p in PAYLOADS:  # the planted markup is on the page as the text it is
        assert p in box.text
    priv = box.find_element(By.CSS_SELECTOR, ".privileged")
    assert "PRIVILEGED" in priv.text and PAYLOADS[2] in priv.text  # the gold answer, marked
    assert "no match:" in box.text  # the verifier's reasons
    rationales = box.find_elements(By.CSS_SELECTOR, ".rationale")
    assert len(rationales) == 4 and "judge's rationale" in rationales[0].text
    assert f"the answer says {PAYLOADS[0]}" in box.text
    shot(browser, "task")
    no_injection(browser)


def test_diff_and_nightly_gate(runs: dict[str, Path], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    page = write_view(runs["root"])  # a nightly root: its newest night, against its baseline
    assert page == runs["2026-11-02"] / "view" / "index.html"
    doc = json.loads((runs["2026-11-02"] / "nightly.json").read_text())
    assert doc["regressions"], "the worse model must trip the gate for this test to mean anything"
    browser.get(page_url(page, "changes"))
    banner = css(browser, "#gate-verdict")
    assert "REGRESSION" in banner.text
    assert len(browser.find_elements(By.CSS_SELECTOR, "figure.history")) == len(doc["gated"])
    before, after = task_table(runs["2026-11-01"]), task_table(runs["2026-11-02"])
    rate_b, rate_a = before.n_pass / before.n, after.n_pass / after.n
    delta = (rate_a - rate_b)[rate_a != rate_b]
    css(browser, "#n-moved")
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.moved-row")
    assert len(rows) == len(delta) > 0
    got = [r.get_attribute("data-task") for r in rows]
    assert sorted(delta.abs().tolist(), reverse=True) == [abs(delta[t]) for t in got]
    shot(browser, "changes")
    css(browser, "#only-flips").click()
    flips = int((((rate_b > 0) & (rate_a == 0)) | ((rate_b == 0) & (rate_a > 0))).sum())
    assert 0 < flips < len(delta)
    assert len(browser.find_elements(By.CSS_SELECTOR, "tr.moved-row")) == flips
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.moved-row")
    rows[0].click()
    pair = css(browser, "#pair-page")
    sides = pair.find_elements(By.CSS_SELECTOR, ".side")
    assert [len(s.find_elements(By.CSS_SELECTOR, ".completion")) for s in sides] == [4, 4]
    assert [s.find_element(By.TAG_NAME, "h3").text for s in sides] == [
        "before: 2026-11-01", "after: 2026-11-02"]
    shot(browser, "changes-pair")
    no_injection(browser)


def test_against_any_run_and_cli(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b = runs["2026-11-01"], runs["2026-11-02"]
    assert main(["view", str(a), "--against", str(b)]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == str(a / "view" / "index.html")
    meta = (a / "view" / "data" / "meta.js").read_text()
    assert '"against":{' in meta and "2026-11-02" in meta
    # no data file can close a script tag or start markup: the payloads are there, escaped
    data = {p.name: p.read_bytes() for p in (a / "view" / "data").iterdir()}
    assert {"meta.js", "s0-tasks.js", "s0-rows-0.js", "d0.js"} <= set(data)
    for name, raw in data.items():
        assert not any(c in raw for c in (b"<", b">", b"&")) and raw.isascii(), name
    assert b"\\u003c/script\\u003e\\u003cscript\\u003ewindow.__pwned" in data["s0-rows-0.js"]
    # the same run gives the same page, byte for byte (no times, no random names)
    write_view(a, b)
    assert {p.name: p.read_bytes() for p in (a / "view" / "data").iterdir()} == data
    # ... wherever the run lies (two copies of a plain run, no nightly.json)
    pages = []
    for where in ("x/one", "y/two"):
        c = a.parent.parent / "copies" / where
        shutil.copytree(a, c)
        (c / "nightly.json").unlink()
        pages.append({p.name: p.read_bytes() for p in write_view(c).parent.rglob("*.*")})
    assert pages[0] == pages[1] and "meta.js" in pages[0]
    assert main(["view", str(a / "rows")]) == 2  # not a run: one error line, exit 2
    assert "not a finished run directory" in capsys.readouterr().err


def test_served_page_loads_over_http(runs: dict[str, Path], browser: Any) -> None:
    """``assay view --serve``: the same page over HTTP on 127.0.0.1 (its CSP allows 'self')."""
    import threading

    from assay.view.serve import make_server

    page = write_view(runs["2026-11-01"])
    server = make_server(page.parent, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        browser.get(f"http://127.0.0.1:{server.server_address[1]}/index.html#samples/0")
        wait(browser, lambda d: applied(d) > 0, "the task list over HTTP")
        assert css(browser, "#n-tasks").text == "24"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_against_a_night_date(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """`--against 2026-11-02` names that night of the same study; a night that is not there is
    an error naming the nights that are."""
    a = runs["2026-11-01"]
    assert main(["view", str(a), "--against", "2026-11-02"]) == 0
    meta = (a / "view" / "data" / "meta.js").read_text()
    assert '"against":{' in meta and "2026-11-02" in meta
    capsys.readouterr()
    assert main(["view", str(a), "--against", "2026-10-31"]) == 2
    err = capsys.readouterr().err
    assert "--against 2026-10-31: no finished night 2026-10-31" in err
    assert "nights there: ['2026-11-02']" in err

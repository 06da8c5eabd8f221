"""The ``hf_dataset`` source end to end: a GSM8K-shaped set saved with ``datasets`` and
completions in a file run through a spec with no user code, checked against the truth the
builder planted (which completions are right) and against each category recomputed alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import gsm_fixture

import assay
from assay import stages
from assay.errors import SpecError
from assay.spec import check_data, check_files, load_spec, parse_spec
from assay.store import Store


@pytest.fixture(scope="module")
def gsm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("gsm")
    truth = gsm_fixture.build(root)
    (root / "spec.yaml").write_text(gsm_fixture.SPEC)
    return root, truth


@pytest.fixture(scope="module")
def ran(gsm: tuple[Path, dict]) -> tuple[Path, dict, stages.StudyRun, dict[str, bytes]]:
    root, truth = gsm
    spec = load_spec(root / "spec.yaml")
    store = Store(root / "store")
    run = stages.run_study(spec, store, progress=None)
    return root, truth, run, stages.report_files(store, run.report)


def test_rows_and_grades_match_the_planted_truth(ran) -> None:
    root, truth, run, _ = ran
    rows = stages.concat_rows(Store(root / "store"), run.graded["model"])
    tasks = truth["tasks"]
    assert len(rows) == sum(len(t["right"]) for t in tasks) == 144
    # rows keep dataset order, each task's completions in file order: grades equal the truth
    assert [r["reward"] for r in rows] == [float(x) for t in tasks for x in t["right"]]
    first = rows[0]
    assert first["prompt"].startswith("Solve it and end with 'The answer is N'.\n\nQuestion: "
                                      "[arithmetic]")
    assert first["privileged"] == {
        "reference": str(int(first["final_text"].split()[-1].rstrip(".")))}
    # the GSM8K answer's "#### 1,242" becomes the reference "1,242"; the numeric verifier reads it
    big = [r for r in rows if r["meta"]["subject"] == "probability"][0]
    assert "," in big["privileged"]["reference"]
    # record fields the map does not use are kept in meta (nested ones too); used ones are not
    assert first["meta"] == {"subject": "arithmetic", "source": {"book": "synthetic", "page": 0}}
    assert first["markers"] == {"latency_ms": 100.0}


def test_per_subject_pass_rates_and_intervals_against_brute_force(ran) -> None:
    root, truth, run, files = ran
    rows = stages.concat_rows(Store(root / "store"), run.graded["model"])
    res = assay.pass_at_by(rows, "subject", k=4)
    for subject in gsm_fixture.SUBJECTS:
        planted = [t["right"] for t in truth["tasks"] if t["subject"] == subject]
        brute = sum(sum(r) / len(r) for r in planted) / len(planted)
        assert res[subject].pass_at_1.value == pytest.approx(brute, abs=1e-12)
        # the category's interval is pass_at on that category's rows alone (its tasks, its n)
        alone = assay.pass_at([r for r in rows if r["meta"]["subject"] == subject], k=4)
        assert res[subject].pass_at_1.interval == alone.pass_at_1.interval
        assert res[subject].pass_at_k.interval == alone.pass_at_k.interval
        assert res[subject].n_tasks == len(planted) == 12
    means = [sum(sum(r) / len(r) for r in p) / len(p) for p in
             ([t["right"] for t in truth["tasks"] if t["subject"] == s]
              for s in gsm_fixture.SUBJECTS)]
    assert res.macro.value == pytest.approx(sum(means) / 3, abs=1e-12)
    assert res.macro.interval.low < res.macro.value < res.macro.interval.high
    # the report carries the same numbers, the macro average, the method and the plot
    md = files["report.md"].decode()
    assert ("### pass_at[model] by subject" in md and str(res.macro) in md
            and "stratified Wilson" in md)
    for s in gsm_fixture.SUBJECTS:
        assert str(res[s].pass_at_1) in md
    assert files["pass_by_subject_model.png"][:8] == b"\x89PNG\r\n\x1a\n"
    assert "![pass@1 of model per subject](pass_by_subject_model.png)" in md
    doc = json.loads(files["report.json"])
    by = next(m for m in doc["measurements"] if m["kind"] == "pass_at_by")
    assert [c["category"] for c in by["categories"]] == sorted(gsm_fixture.SUBJECTS)


def test_report_prints_what_was_read_and_the_rows_file_keeps_meta(ran, tmp_path: Path) -> None:
    root, _, run, files = ran
    md = files["report.md"].decode()
    import datasets

    ds = datasets.load_from_disk(str(root / "gsm"))["test"]
    checksum = assay.content_hash(ds.to_list(), "data")
    assert f"36 records read, content checksum `{checksum}`" in md and "revision (local data)" in md
    from assay.report import write_run_dir

    rows = stages.concat_rows(Store(root / "store"), run.graded["model"])
    write_run_dir(tmp_path, {}, {"model": rows}, {})
    back = assay.Rows.read_parquet(tmp_path / "rows" / "model.parquet")
    assert back == rows and back[5]["meta"]["subject"] == "arithmetic"
    assert "meta" in pq.read_table(tmp_path / "rows" / "model.parquet").column_names
    # the training export leaves the record's other fields out (they can hold the solution)
    assert "meta" not in rows.training_table().column_names


def test_a_rerun_is_cached_and_moving_the_data_changes_nothing(ran, tmp_path: Path) -> None:
    root, _, run, _ = ran
    moved = tmp_path / "elsewhere"
    shutil.copytree(root / "gsm", moved / "gsm")
    shutil.copy(root / "completions.jsonl", moved / "completions.jsonl")
    (moved / "spec.yaml").write_text(gsm_fixture.SPEC)
    again = stages.run_study(load_spec(moved / "spec.yaml"), Store(root / "store"), progress=None)
    assert again.computed_stages == [] and again.spec_checksum == run.spec_checksum


def test_limit_reads_the_first_records_and_changes_the_checksum(gsm, tmp_path: Path) -> None:
    root, _ = gsm
    text = gsm_fixture.SPEC.replace("split: test", "split: test\n    limit: 12")
    spec = parse_spec(text, base_dir=str(root))
    # the completions of the tasks the limit cuts are left out (not an unknown-task error)
    rows, info = spec.sources[0].build(spec.paths)
    assert len(rows) == 48 and info["records"] == 12 and info["limit"] == 12
    assert check_data(spec) == ([], [])
    assert {r["meta"]["subject"] for r in rows} == {"arithmetic"}
    full = parse_spec(gsm_fixture.SPEC, base_dir=str(root))
    assert full.sources[0].build(full)[1]["checksum"] != info["checksum"]


def test_a_completion_for_an_unknown_task_or_a_task_without_completions_is_named(
        gsm, tmp_path: Path) -> None:
    root, _ = gsm
    shutil.copytree(root / "gsm", tmp_path / "gsm")
    lines = (root / "completions.jsonl").read_text().splitlines()
    (tmp_path / "completions.jsonl").write_text("\n".join(lines[4:]) + "\n")  # task 0 has none
    spec = parse_spec(gsm_fixture.SPEC, base_dir=str(tmp_path))
    with pytest.raises(SpecError,
                       match=r"task '0' has no completion in .*completions.jsonl; .*limit"):
        spec.sources[0].build_rows(spec)
    (tmp_path / "completions.jsonl").write_text(
        "\n".join(lines + ['{"idx": 99, "completion": "1"}']) + "\n")
    with pytest.raises(SpecError, match=r"completions.jsonl record 145: idx '99' is not a task of "
                                        r"source 'model'"):
        spec.sources[0].build_rows(spec)


def test_the_local_data_is_its_identity(gsm, tmp_path: Path) -> None:
    import datasets

    root, _ = gsm
    shutil.copytree(root / "gsm", tmp_path / "gsm")
    shutil.copy(root / "completions.jsonl", tmp_path / "completions.jsonl")
    spec = parse_spec(gsm_fixture.SPEC, base_dir=str(tmp_path))
    before = spec.checksum()
    dd = datasets.load_from_disk(str(tmp_path / "gsm"))
    test, train = dd["test"].to_list(), dd["train"].to_list()
    test[3]["answer"] += " "  # one space in one record
    shutil.rmtree(tmp_path / "gsm")
    datasets.DatasetDict({"test": datasets.Dataset.from_list(test),
                          "train": datasets.Dataset.from_list(train)}).save_to_disk(
                              str(tmp_path / "gsm"))
    assert parse_spec(gsm_fixture.SPEC, base_dir=str(tmp_path)).checksum() != before


def test_a_hub_id_is_keyed_on_its_revision_and_never_downloads_by_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    (tmp_path / "completions.jsonl").write_text('{"idx": 0, "completion": "7"}\n')
    text = gsm_fixture.SPEC.replace("path: gsm", "path: openai/gsm8k\n    config: main")
    a = parse_spec(text.replace("config: main", "config: main\n    revision: abc123"),
                   base_dir=str(tmp_path))
    b = parse_spec(text.replace("config: main", "config: main\n    revision: def456"),
                   base_dir=str(tmp_path))
    assert a.sources[0].identity(a)["revision"] == "abc123" and a.checksum() != b.checksum()
    with pytest.raises(SpecError,
                       match=r"'openai/gsm8k' is not a local path .*allow_download: true"):
        a.sources[0].build_rows(a)


def test_validate_names_the_yaml_path_and_the_fix(gsm, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = gsm
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))

    def problems(text: str) -> tuple[list[str], list[str]]:
        spec = parse_spec(text, base_dir=str(root))
        files = check_files(spec)
        return (files, []) if files else check_data(spec)

    assert problems(gsm_fixture.SPEC) == ([], [])
    p, _ = problems(gsm_fixture.SPEC.replace("reference: answer", "reference: answr"))
    assert (len(p) == 1 and p[0].startswith("sources[0].fields.reference: 'answr' is not a field: "
                                            "the record has"))
    assert "'answer'" in p[0] and "fix: name one of the record's fields" in p[0]
    p, _ = problems(gsm_fixture.SPEC.replace("reference: answer", "reference: source.pge"))
    assert p[0].startswith("sources[0].fields.reference: 'source.pge' is not a field: source has "
                           "['book', 'page']")
    p, _ = problems(gsm_fixture.SPEC.replace("split: test", "split: validation"))
    assert p == [f"sources[0].split: source 'model' ({root / 'gsm'}): split 'validation' not "
                 "found; the dataset has ['test', 'train']"]
    # no split: on a dataset with two is refused (it used to read train silently)
    p, _ = problems(gsm_fixture.SPEC.replace("    split: test\n", ""))
    assert p == [f"sources[0].split: source 'model' ({root / 'gsm'}): split: the dataset has "
                 "splits ['test', 'train']; choose one with split: (none is picked for you)"]
    p, _ = problems(gsm_fixture.SPEC.replace("by: subject", "by: subjet"))
    assert (len(p) == 1 and p[0].startswith("measure.pass_at.by: 'subjet' is not a field of source "
                                            "'model''s rows"))
    assert "meta.subject" in p[0] and "fix:" in p[0]
    p, _ = problems(gsm_fixture.SPEC.replace("{{ question }}", "{{ questoin }}"))
    assert p[0].startswith("sources[0].prompt_template:") and "'questoin' is undefined" in p[0]
    p, w = problems(gsm_fixture.SPEC.replace("path: gsm", "path: openai/gsm8k"))
    assert w == ["sources[0].revision: not set for the hub id 'openai/gsm8k': results are then not "
                 "reproducible (the hub copy can change); pin it with revision: <commit sha>"]
    assert p[0].startswith("sources[0].path:") and "save_to_disk" in p[0]


def test_assay_validate_prints_them(gsm, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    from assay.cli import main

    root, _ = gsm
    bad = root / "bad.yaml"
    bad.write_text(gsm_fixture.SPEC.replace("by: subject", "by: level"))
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "measure.pass_at.by: 'level' is not a field of source 'model''s rows" in err
    assert main(["validate", str(root / "spec.yaml")]) == 0
    assert "ok (sources: model)" in capsys.readouterr().out


def test_the_shipped_own_benchmark_config_runs_offline(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    # the shipped data is what its generator writes (seeded, byte for byte)
    data = root / "configs" / "data" / "own_benchmark"
    before = {p.relative_to(data): p.read_bytes() for p in sorted(data.rglob("*.jsonl"))}
    work = tmp_path / "configs"
    shutil.copytree(root / "configs" / "data", work / "data")
    subprocess.run([sys.executable, str(work / "data" / "make_own_benchmark.py")], check=True)
    after = {p.relative_to(work / "data" / "own_benchmark"): p.read_bytes()
             for p in sorted((work / "data" / "own_benchmark").rglob("*.jsonl"))}
    assert before == after and len(before) == 3
    spec = load_spec(root / "configs" / "own_benchmark.yaml")
    assert check_files(spec) == [] and check_data(spec) == ([], [])
    store = Store(tmp_path / "store")
    run = stages.run_study(spec, store, progress=None)
    files = stages.report_files(store, run.report)
    md = files["report.md"].decode()
    for part in ("### pass_at[base] by subject", "### compare[base -> tuned] by subject",
                 "macro pass@1", "Holm across 3 tests", "pass_by_subject_tuned.png"):
        assert part in md
    rows = stages.concat_rows(store, run.graded["tuned"])
    assert {r["meta"]["subject"] for r in rows} == {"arithmetic", "percentages", "geometry"}
    assert set(rows[0]["markers"]) == {"latency_ms", "tokens"}


def test_a_parquet_folder_with_completions_in_the_records_and_steps_on_meta(tmp_path: Path) -> None:
    import datasets

    recs = [{"problem": {"text": f"{i}*2?", "level": i % 3},
             "model_output": str(2 * i + (i % 4 == 0)),
             "score": float(i % 4 != 0)} for i in range(24)]
    (tmp_path / "data").mkdir()
    datasets.Dataset.from_list(recs[:12]).to_parquet(str(tmp_path / "data" / "part-0.parquet"))
    datasets.Dataset.from_list(recs[12:]).to_parquet(str(tmp_path / "data" / "part-1.parquet"))
    spec = parse_spec("""
name: given
sources:
  - name: m
    kind: hf_dataset
    path: data
    fields: {prompt: problem.text, completion: model_output, reward: score}
    steps: [{op: where, field: meta.problem.level, cmp: "!=", value: 0}]
measure: {pass_at: {by: meta.problem.level}}
""", base_dir=str(tmp_path))
    assert check_data(spec) == ([], [])
    store = Store(tmp_path / "store")
    run = stages.run_study(spec, store, progress=None)
    rows = stages.concat_rows(store, run.graded["m"])
    kept = [r for r in recs if r["problem"]["level"] != 0]
    assert [r["final_text"] for r in rows] == [r["model_output"] for r in kept]
    assert [r["reward"] for r in rows] == [r["score"] for r in kept]
    res = assay.pass_at_by(rows, "meta.problem.level")
    for lev in (1, 2):
        mine = [r["score"] for r in kept if r["problem"]["level"] == lev]
        assert res[str(lev)].pass_at_1.value == pytest.approx(sum(mine) / len(mine))


def solve_even_cases(prompts):
    """A 'model' for generate: the right product on even cases, one off on odd ones."""
    import re

    out = []
    for p in prompts:
        a, b, case = map(int, re.search(r"holds (\d+) rows of (\d+) jars\. "
                                        r"How many jars\? \(case (\d+)\)", p).groups())
        gold = a * b + (1000 if "[probability]" in p else 0)
        out.append(f"The answer is {gold if case % 2 == 0 else gold + 1}.")
    return out


def test_a_hub_style_dataset_with_generate_instead_of_a_completions_file(
        gsm, tmp_path: Path) -> None:
    root, _ = gsm
    text = gsm_fixture.SPEC.replace("    completions: {path: completions.jsonl, key: idx}\n",
                                    f"""    limit: 6
    generate:
      model: {{kind: function, callable: "{__name__}:solve_even_cases"}}
      api: completions
      k: 2
""").replace("fields: {reference: answer, markers: [latency_ms]}", "fields: {reference: answer}")
    with pytest.raises(SpecError, match=r"measure.pass_at.k: 4 is above sources\[0\].generate.k 2"):
        parse_spec(text, base_dir=str(root))  # pass@4 of 2 samples per task: undefined
    text = text.replace("pass_at: {k: 4,", "pass_at: {k: 2,")
    spec = parse_spec(text, base_dir=str(root))
    assert check_data(spec) == ([], [])
    store = Store(tmp_path / "store")
    run = stages.run_study(spec, store, progress=None)
    rows = stages.concat_rows(store, run.graded["model"])
    assert len(rows) == 12 and [r["reward"] for r in rows] == [1.0, 1.0, 0.0, 0.0] * 3
    assert {r["meta"]["subject"] for r in rows} == {"arithmetic"}
    with pytest.raises(SpecError, match="generate: and completions: both give the completions"):
        parse_spec(text.replace("    limit: 6\n",
                                "    limit: 6\n    completions: {path: completions.jsonl}\n"),
                   base_dir=str(root))

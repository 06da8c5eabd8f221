"""The nightly flow: night-over-night comparison flags a real regression and nothing else; by
default (no ``nightly:`` section) pass@1 is gated against the previous night."""

from __future__ import annotations

import json
from pathlib import Path

SPEC = """
name: nightly-demo
sources:
  - name: model
    kind: file
    path: answers.jsonl
    fields: {prompt: q, completion: c, task_id: id, reward: r}
measure:
  pass_at: {k: 1}
"""


def write_night(tmp: Path, pass_rate_of: callable) -> Path:
    with open(tmp / "answers.jsonl", "w") as f:
        for i in range(40):
            for j in range(4):
                f.write(json.dumps({"id": f"t{i}", "q": f"question {i}", "c": f"answer {j}",
                                    "r": int(pass_rate_of(i, j))}) + "\n")
    p = tmp / "spec.yaml"
    p.write_text(SPEC)
    return p


def test_nightly_flags_regression_against_previous_night(prefect_server: str,
                                                         tmp_path: Path) -> None:
    import pytest

    from assay.flows.nightly import NightlyRegression, nightly

    root, store = tmp_path / "nights", str(tmp_path / "store")
    good = lambda i, j: (i + j) % 5 != 0  # noqa: E731  ~80% pass
    spec = write_night(tmp_path, good)
    first = nightly(specs=[str(spec)], root=str(root), night="2026-11-01", store_root=store)
    assert (first["regressions"] == []
            and first["studies"]["nightly-demo"]["baseline"] == {"model": None})
    # Same data the next night: compared, no regression.
    second = nightly(specs=[str(spec)], root=str(root), night="2026-11-02", store_root=store)
    assert second["studies"]["nightly-demo"]["baseline"] == {"model": "2026-11-01"}
    assert second["regressions"] == []
    # The model breaks on most tasks: flagged, and the flow run fails.
    write_night(tmp_path, lambda i, j: good(i, j) and i % 3 == 0)
    with pytest.raises(NightlyRegression, match="nightly-demo/model/pass@1") as e:
        nightly(specs=[str(spec)], root=str(root), night="2026-11-03", store_root=store)
    third = e.value.summary
    assert third["studies"]["nightly-demo"]["baseline"] == {"model": "2026-11-02"}
    assert third["regressions"] == ["nightly-demo/model/pass@1"]
    md = (root / "nightly-demo" / "2026-11-03" / "nightly.md").read_text()
    assert "REGRESSION" in md and "2026-11-02" in md
    doc = json.loads((root / "nightly-demo" / "2026-11-03" / "nightly.json").read_text())
    assert [(r["source"], r["metric"]) for r in doc["regressions"]] == [("model", "pass@1")]
    assert doc["comparisons"][0]["report"].startswith("verdict (pass@1): worse")
    assert (root / "nightly-demo" / "2026-11-03" / "report.md").is_file()
    # the night's page is written after the gate: it shows the verdict and the baseline's diff
    meta = (root / "nightly-demo" / "2026-11-03" / "view" / "data" / "meta.js").read_text()
    assert '"verdict":"regression"' in meta and '"run":"2026-11-02"' in meta


def _params(path: Path, name: str) -> set[str]:
    """A flow function's parameter names, read from its source (no Prefect import here: the
    server fixture needs Prefect unimported until it has set the environment)."""
    import ast

    fn = next(n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)
              and n.name == name)
    return {a.arg for a in fn.args.args + fn.args.kwonlyargs}


def test_deployment_definition_offline() -> None:
    """deployments/prefect.yaml names the nightly and the store-upkeep flows, each with a cron
    and a timezone, concurrency 1 and a process work pool; the parameters they list exist."""
    import yaml

    root = Path(__file__).resolve().parents[2]
    cfg = yaml.safe_load((root / "deployments" / "prefect.yaml").read_text())
    deps = {d["name"]: d for d in cfg["deployments"]}
    # module paths: Prefect imports the installed module once (a file path loads it again)
    assert deps["nightly"]["entrypoint"] == "assay.flows.nightly.nightly"
    assert deps["store-upkeep"]["entrypoint"] == "assay.flows.upkeep.store_upkeep"
    for dep in deps.values():
        assert dep["schedules"][0]["cron"] and dep["schedules"][0]["timezone"]
        assert dep["concurrency_limit"] == 1 and dep["work_pool"]["name"]
        package, module, name = dep["entrypoint"].rsplit(".", 2)
        assert package == "assay.flows", dep["name"]  # the repository's flows/ folder
        assert set(dep["parameters"]) <= _params(root / "flows" / f"{module}.py", name), dep["name"]
    for spec in deps["nightly"]["parameters"]["specs"]:
        assert (root / spec).is_file()

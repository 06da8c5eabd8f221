"""Specs whose graph nodes run side by side in one process and touch the same libraries (issue
39), the local data they read, and a runner that runs one in a fresh interpreter (cold imports).

``run_fresh`` runs :func:`assay.stages.run_study` in a new ``python`` and returns its exit status
and the report's files; ``guard=False`` first turns :mod:`assay.libguard` off in that interpreter
(no imports before the graph, no lock around ``datasets``) to show what a test would catch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import gsm_fixture

ROOT = Path(__file__).resolve().parents[2]
HELPERS = Path(__file__).resolve().parent

def _gsm(name: str, verifier: str) -> str:
    """A source over the GSM8K-shaped DatasetDict :func:`build` saves, with its completions."""
    return f"""
  - name: {name}
    kind: hf_dataset
    path: gsm
    split: test
    fields: {{prompt: question, reference: answer}}
    reference_regex: "####\\\\s*(.+)$"
    completions: {{path: completions.jsonl, key: idx}}
    verifier: {{kind: {verifier}}}"""


# One source per mode/kind, each a YAML list item (two-space indented under ``sources:``);
# {openai} is the loopback server's base URL. Each reads only what build() wrote.
SOURCES: dict[str, str] = {
    # a DatasetDict saved with save_to_disk, completions in a file
    "hf_numeric": _gsm("numeric", "numeric"),
    # the same folder graded another way (the first repro)
    "hf_exact": _gsm("exact", "math_equal"),
    # MMLU-shaped multiple choice from a folder of JSONL files, scored by a local transformers LM
    "hf_choices": """
  - name: mmlu
    kind: hf_dataset
    path: mmlu
    split: test
    prompt_template: "{{ question }}\\nA. {{ choices[0] }}\\nB. {{ choices[1] }}"""
    """\\nC. {{ choices[2] }}\\nD. {{ choices[3] }}\\nAnswer:"
    choices: {model: {kind: hf, path: '{root}/lm'}, templates: [A, B, C, D], answer: answer}""",
    # multiple choice read from a file, scored by the same LM (ARC next to MMLU)
    "choices": """
  - name: arc
    kind: file
    path: mmlu/test.jsonl
    fields: {prompt: question}
    choices: {model: {kind: hf, path: '{root}/lm'}, answer: answer}""",
    "file": """
  - name: plain
    kind: file
    path: plain.jsonl
    fields: {prompt: q, completion: c, reference: gold, task_id: id}
    verifier: {kind: exact_match}""",
    "humaneval": """
  - name: he
    kind: humaneval
    steps: [{op: slice, start: 0, stop: 4}]
    policy: {k: 2, seed: 3, skill: 0.5}
    verifier: {kind: code_exec, params: {timeout: 5}}""",
    "gen_openai": """
  - name: served
    kind: file
    path: sums.jsonl
    fields: {prompt: q, reference: gold, task_id: id}
    generate:
      model: {kind: openai, base_url: "{openai}", model: m}
      api: completions
      k: 2
      params: {temperature: 0.7, max_tokens: 16}
      seed: 0
    verifier: {kind: numeric}""",
    "gen_hf": """
  - name: local
    kind: file
    path: sums.jsonl
    fields: {prompt: q, reference: gold, task_id: id}
    generate:
      model: {kind: hf, path: '{root}/lm'}
      api: completions
      k: 1
      params: {temperature: 0.0, max_tokens: 4}
    verifier: {kind: numeric}""",
    "perplexity": """
  - name: ppl
    kind: file
    path: text.jsonl
    fields: {prompt: text}
    perplexity: {model: {kind: hf, path: '{root}/lm'}}""",
    "judge": """
  - name: judged
    kind: file
    path: plain.jsonl
    fields: {prompt: q, completion: c, reference: gold, task_id: id}
    verifier:
      kind: judge
      params: {model: {kind: openai, base_url: "{openai}", model: m}}""",
}

# Completions scored by a local transformers reward model (a source and the reward section).
REWARD_SOURCE = """
  - name: scored
    kind: file
    path: plain.jsonl
    fields: {prompt: q, completion: c, reference: gold, task_id: id}
    verifier: {kind: exact_match}"""
REWARD = """
reward:
  models:
    - {name: rm, kind: hf, path: '{root}/rm', params: {device: cpu}}
  data: null
  score: {sources: [scored]}
"""

#: What the matrix combines two and three at a time: each source mode and kind once (the
#: repros' second hf_dataset source and MMLU-from-a-folder are in REPROS), and reward scoring.
KINDS = ("hf_numeric", "file", "humaneval", "gen_openai", "gen_hf", "choices", "perplexity",
         "reward", "judge")

#: The issue's two repros.
REPROS = {"two_hf_datasets": ("hf_numeric", "hf_exact"), "hf_dataset_and_model": ("hf_choices",
                                                                                   "choices")}


def spec_text(name: str, parts: tuple[str, ...], root: Path, openai: str = "") -> str:
    """A spec of the sources in ``parts`` (``reward``: a source scored by a reward model);
    ``root``: where :func:`build` wrote (models are named by absolute path: a cluster worker
    does not run in the spec's folder); ``openai``: the loopback server's URL, serving ``m``."""
    sources = "".join(REWARD_SOURCE if p == "reward" else SOURCES[p] for p in parts)
    text = f"version: 1\nname: {name}\nsources:{sources}\n"
    if "reward" in parts:
        text += REWARD
    return text.replace("{openai}", openai).replace("{root}", str(root))


def build(root: Path) -> Path:
    """Write every source's data into ``root`` (a GSM8K-shaped DatasetDict, an MMLU-shaped
    file, sums, plain completions, text) and the tiny models (``lm``, ``rm``)."""
    import datasets

    from helpers.reward_fixtures import build_tiny_reward_model
    from helpers.tiny_bpe import build_tiny_bpe_lm

    root.mkdir(parents=True, exist_ok=True)
    gsm_fixture.build(root, tasks_per_subject=4, k=2)
    # saved in shards, as a real set is: each split is several files datasets reads at once
    saved = datasets.load_from_disk(str(root / "gsm"), keep_in_memory=True)
    shutil.rmtree(root / "gsm")
    saved.save_to_disk(str(root / "gsm"), num_shards={"test": 4, "train": 2})
    (root / "mmlu").mkdir(exist_ok=True)
    shutil.copy(ROOT / "configs" / "data" / "mmlu_tiny" / "test.jsonl", root / "mmlu")
    _jsonl(root / "sums.jsonl", [{"id": f"s{i}", "q": f"What is {i} + {2 * i}?", "gold": 3 * i}
                                 for i in range(6)])
    _jsonl(root / "plain.jsonl", [{"id": f"p{i // 2}", "q": f"Capital {i // 2}?",
                                   "c": f"city{i % 3}", "gold": "city1"} for i in range(8)])
    _jsonl(root / "text.jsonl", [{"text": f"the {w} is over there"} for w in
                                 ("cat", "dog", "bird", "fish")])
    build_tiny_bpe_lm(root / "lm")
    build_tiny_reward_model(root / "rm")
    return root


def _jsonl(path: Path, recs: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")


#: The fresh interpreter's thread switch interval: far shorter than Python's 5 ms, so a window
#: between two steps of a library's shared state that a switch must fall into is hit often.
SWITCH = 1e-5

# What the fresh interpreter runs: argv = spec, store, max_parallel (0: the default), guard,
# switch interval.
_SCRIPT = """
import hashlib, json, sys
from assay import libguard, stages
from assay.spec import load_spec
from assay.store import Store
spec_path, store, cap, guard = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "on"
sys.setswitchinterval(float(sys.argv[5]))
if not guard:
    import contextlib
    libguard.prepare = lambda *a, **k: None
    libguard.prepare_node = lambda *a, **k: None
    libguard.LIBRARIES = contextlib.nullcontext()
run = stages.run_study(load_spec(spec_path), Store(store), progress=None,
                       max_parallel=cap or None)
files = stages.report_files(Store(store), run.report)
for name, keys in sorted(run.graded.items()):
    rows = stages.concat_rows(Store(store), keys)
    files["rows:" + name] = json.dumps(rows, sort_keys=True, default=repr).encode()
print("FILES " + json.dumps({k: hashlib.sha256(v).hexdigest() for k, v in sorted(files.items())}))
"""


def run_fresh(spec: Path, store: Path, *, max_parallel: int | None = None, guard: bool = True,
              switch: float = SWITCH, timeout: float = 300) -> tuple[int, dict[str, str], str]:
    """Run ``spec`` into a new ``store`` in a fresh interpreter: (exit status, the report's
    files and each source's graded rows as name -> sha256, stderr)."""
    # datasets' cache of the JSON folders it converts: the run's own (cold, and nothing shared)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HELPERS.parent)]),
           "HF_DATASETS_CACHE": str(store) + "-hf", "HF_HUB_OFFLINE": "1"}
    p = subprocess.run([sys.executable, "-c", _SCRIPT, str(spec), str(store),
                        str(max_parallel or 0), "on" if guard else "off", str(switch)],
                       capture_output=True, text=True, timeout=timeout, cwd=spec.parent, env=env)
    files: dict[str, str] = {}
    for line in p.stdout.splitlines():
        if line.startswith("FILES "):
            files = json.loads(line[6:])
    return p.returncode, files, p.stderr


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`build`'s folder, once per test module."""
    return build(tmp_path_factory.mktemp("races"))


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    """A loopback OpenAI server serving model ``m`` (its base URL), stopped at the end."""
    from helpers.openai_server import OpenAIServer

    server = OpenAIServer(["m"]).start()
    try:
        yield server.base_url
    finally:
        server.stop()


def same_as_one_at_a_time(data: Path, served: str, name: str, parts: tuple[str, ...],
                          runs: int) -> None:
    """``runs`` fresh runs of the spec of ``parts`` at the default max_parallel: each rc 0 with
    the bytes (report and graded rows) of a ``max_parallel=1`` run."""
    spec = data / f"{name}.yaml"
    spec.write_text(spec_text(name, parts, data, served))
    rc, want, err = run_fresh(spec, data / f"{name}-serial", max_parallel=1)
    assert rc == 0 and want, err[-3000:]
    for i in range(runs):
        rc, got, err = run_fresh(spec, data / f"{name}-{i}")
        assert rc == 0, f"run {i + 1} of {runs}: {err[-3000:]}"
        assert got == want, f"run {i + 1} of {runs}: bytes differ from the one-at-a-time run"

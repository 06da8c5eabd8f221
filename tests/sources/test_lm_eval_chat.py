"""kind: lm_eval's chat options (apply_chat_template, system_instruction, fewshot_as_multiturn)
against lm-eval itself: the shipped gsm8k over local documents through ``simple_evaluate(model=
HFLM)`` with a tiny chat-templated LM (contexts and greedy responses equal, per document), an
MMLU-shaped multiple_choice task (contexts and acc), and lm-eval's chat-completions messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MMLU = ROOT / "configs" / "data" / "mmlu_tiny"
MAX_GEN = 6  # few tokens: the tiny model's text is noise, the point is equality
SHOTS = 2
SYSTEM = "You are a careful solver."

MC_TASK = """task: lmx_chat_mc
dataset_path: json
dataset_kwargs:
  data_files: {{test: {test}, dev: {dev}}}
output_type: multiple_choice
test_split: test
fewshot_split: dev
doc_to_text: "{{{{question.strip()}}}}\\nA. {{{{choices[0]}}}}\\nB. {{{{choices[1]}}}}\\nAnswer:"
doc_to_choice: ["A", "B", "C", "D"]
doc_to_target: answer
num_fewshot: 1
metric_list:
  - {{metric: acc, aggregation: mean, higher_is_better: true}}
"""


def _gsm_docs(n: int, start: int) -> list[dict[str, Any]]:
    """gsm8k-shaped records: a question and a worked answer ending in '#### N'."""
    return [{"question": f"what is the number of water {i} + {i % 3} ?",
             "answer": f"the answer is {i} + {i % 3} = {i + i % 3}.\n#### {i + i % 3}"}
            for i in range(start, start + n)]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The shipped gsm8k YAML on local data, an MMLU-shaped task, the tiny chat LM and
    lm-eval's own runs of both with the chat options."""
    pytest.importorskip("lm_eval")
    import os

    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import lm_eval
    from helpers.tiny_chat import build_tiny_chat_lm
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    base = tmp_path_factory.mktemp("lmchat")
    data = base / "data"
    data.mkdir()
    for split, (n, start) in {"train": (4, 100), "test": (5, 0)}.items():
        (data / f"{split}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in _gsm_docs(n, start)))
    shipped = Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml"
    cfg = yaml.safe_load(shipped.read_text())
    cfg.pop("tag", None)
    cfg.pop("dataset_name", None)
    cfg["dataset_path"] = "json"
    cfg["dataset_kwargs"] = {"data_files": {s: str(data / f"{s}.jsonl")
                                            for s in ("train", "test")}}
    tasks = base / "tasks"
    tasks.mkdir()
    (tasks / "gsm8k.yaml").write_text(yaml.safe_dump(cfg))
    (tasks / "lmx_chat_mc.yaml").write_text(MC_TASK.format(test=MMLU / "test.jsonl",
                                                            dev=MMLU / "dev.jsonl"))
    model = build_tiny_chat_lm(base / "tiny")
    lm = HFLM(pretrained=str(model), dtype="float32", batch_size=4, device="cpu")

    def run(task: str, **kw: Any) -> dict[str, Any]:
        return simple_evaluate(model=lm, tasks=[task], log_samples=True, bootstrap_iters=0,
                               task_manager=TaskManager(include_path=str(tasks),
                                                        include_defaults=False),
                               fewshot_random_seed=1234, apply_chat_template=True, **kw)

    gen = {"num_fewshot": SHOTS, "gen_kwargs": {"max_gen_toks": MAX_GEN},
           "system_instruction": SYSTEM}
    return {"base": base, "model": model, "tasks": tasks,
            "multi": run("gsm8k", fewshot_as_multiturn=True, **gen),
            "single": run("gsm8k", fewshot_as_multiturn=False, **gen),
            "mc": run("lmx_chat_mc", limit=8, system_instruction=SYSTEM)}


def _gsm(world: dict[str, Any], **over: Any) -> dict[str, Any]:
    src = {"name": "gsm", "kind": "lm_eval", "task": "gsm8k", "include_path": "tasks",
           "num_fewshot": SHOTS, "gen_kwargs": {"max_gen_toks": MAX_GEN},
           "apply_chat_template": True, "system_instruction": SYSTEM,
           "generate": {"model": {"kind": "hf", "path": str(world["model"]),
                                  "dtype": "float32"},
                        "api": "completions",
                        "params": {"temperature": 0.0, "max_tokens": MAX_GEN,
                                   "stop": ["Question:", "</s>", "<|im_end|>"]}}}
    src.update(over)
    return src


def _spec(world: dict[str, Any], src: dict[str, Any]) -> Any:
    from assay.spec import parse_spec

    return parse_spec(yaml.safe_dump({"version": 1, "name": "chat", "sources": [src]}),
                      source="chat.yaml", base_dir=str(world["base"]))


def _samples(res: dict[str, Any], task: str) -> dict[int, dict[str, Any]]:
    return {s["doc_id"]: s for s in res["samples"][task]}


@pytest.mark.slow  # lm-eval's import, its task pipeline and two generation runs
@pytest.mark.parametrize("multiturn", [True, False])
def test_gsm8k_chat_equals_simple_evaluate(world: dict[str, Any], tmp_path: Path,
                                           multiturn: bool) -> None:
    """apply_chat_template with a system instruction, few-shot examples as turns or as one user
    turn: every rendered context and greedy response equals simple_evaluate(HFLM)'s, and so do
    the strict-match numbers."""
    from assay.stages import concat_rows, run_study
    from assay.store import Store

    spec = _spec(world, _gsm(world, fewshot_as_multiturn=multiturn))
    store = Store(tmp_path / "store")
    run = run_study(spec, store, progress=None)
    rows = sorted(concat_rows(store, run.graded["gsm"]), key=lambda r: int(r["task_id"]))
    res = world["multi" if multiturn else "single"]
    by = _samples(res, "gsm8k")
    assert len(rows) == 5 == len(by)
    for r in rows:
        s = by[int(r["task_id"])]
        ctx = s["arguments"][0][0]
        assert r["prompt"] == ctx, r["task_id"]
        # the tokenizer's template rendered it: the system turn, then the shots as turns or not
        assert ctx.startswith(f"<system>{SYSTEM}\n<user>") and ctx.endswith("<assistant>")
        assert ctx.count("<assistant>") == (SHOTS + 1 if multiturn else 1)
        assert r["final_text"] == s["resps"][0][0], r["task_id"]  # HFLM's text, token for token
        assert r["markers"]["exact_match,strict-match"] == s["exact_match"]
    assert sum(bool(r["final_text"].strip()) for r in rows) >= 3
    other = world["single" if multiturn else "multi"]
    assert rows[0]["prompt"] != _samples(other, "gsm8k")[0]["arguments"][0][0]


def test_openai_chat_gets_lm_evals_messages(world: dict[str, Any], tmp_path: Path) -> None:
    """kind: openai with api: chat: each row's messages, and each request the server receives,
    are the list lm-eval's chat-completions model sends (its JsonChatStr, decoded), system
    instruction and shots as turns; the task's own metrics grade the answers."""
    from helpers.openai_server import OpenAIServer
    from lm_eval.models.api_models import TemplateAPI
    from lm_eval.tasks import TaskManager

    from assay.stages import concat_rows, run_study
    from assay.store import Store

    # what lm-eval's local-chat-completions renders (no tokenizer: the JSON of the messages)
    holder = type("Holder", (), {"tokenizer_backend": None, "tokenized_requests": False})()
    task = TaskManager(include_path=str(world["tasks"]), include_defaults=False).load(
        ["gsm8k"])["tasks"]["gsm8k"]
    task.set_config(key="num_fewshot", value=SHOTS)
    task.set_fewshot_seed(seed=1234)
    task.build_all_requests(system_instruction=SYSTEM, apply_chat_template=True,
                            fewshot_as_multiturn=True,
                            chat_template=lambda h, **kw: TemplateAPI.apply_chat_template(
                                holder, h, **kw))
    want = {i.doc_id: json.loads(i.arguments[0].prompt) for i in task.instances}

    server = OpenAIServer(models=["m"]).start()
    try:
        src = _gsm(world)
        src["generate"] = {**src["generate"], "api": "chat",
                           "model": {"kind": "openai", "model": "m",
                                     "base_url": server.base_url}}
        spec = _spec(world, src)
        rows, _ = spec.sources[0].build(spec.paths)
        got = {int(r["task_id"]): r["messages"] for r in rows}
        assert got == want and len(got) == 5
        assert [m["role"] for m in got[0]] == (["system"] + ["user", "assistant"] * SHOTS
                                               + ["user"])
        store = Store(tmp_path / "store")
        graded = concat_rows(store, run_study(spec, store, progress=None).graded["gsm"])
    finally:
        server.stop()
    sent = sorted((r["messages"] for r in server.requests), key=lambda m: m[-1]["content"])
    assert sent == sorted(want.values(), key=lambda m: m[-1]["content"])
    assert all(r["_path"] == "/v1/chat/completions" for r in server.requests)
    assert len(graded) == 5 and all("exact_match,strict-match" in r["markers"] for r in graded)


@pytest.mark.slow  # lm-eval's log-likelihoods and assay's over the MMLU-shaped task
def test_multiple_choice_chat_equals_simple_evaluate(world: dict[str, Any],
                                                     tmp_path: Path) -> None:
    """A multiple_choice task under apply_chat_template: the rendered contexts, the choices
    scored with no delimiter (lm-eval's rule under a template) and acc equal lm-eval's."""
    from assay.stages import concat_rows, run_study
    from assay.store import Store

    src = {"name": "mc", "kind": "lm_eval", "task": "lmx_chat_mc", "include_path": "tasks",
           "limit": 8, "apply_chat_template": True, "system_instruction": SYSTEM,
           "choices": {"model": {"kind": "hf", "path": str(world["model"]),
                                 "dtype": "float32"}}}
    spec = _spec(world, src)
    store = Store(tmp_path / "store")
    run = run_study(spec, store, progress=None)
    rows = sorted(concat_rows(store, run.graded["mc"]), key=lambda r: int(r["task_id"]))
    by = _samples(world["mc"], "lmx_chat_mc")
    assert len(rows) == 8 == len(by)
    for r in rows:
        s = by[int(r["task_id"])]
        assert r["prompt"] == s["arguments"][0][0]
        assert [a[1] for a in s["arguments"]] == ["A", "B", "C", "D"]  # no delimiter
        assert json.loads(r["privileged"])["delimiter"] == "" if isinstance(
            r["privileged"], str) else r["privileged"]["delimiter"] == ""
        assert r["reward"] == s["acc"], r["task_id"]
    accs = [r["reward"] for r in rows]
    assert sum(accs) / len(accs) == pytest.approx(world["mc"]["results"]["lmx_chat_mc"]
                                                  ["acc,none"], abs=1e-12)


def test_chat_options_validated(world: dict[str, Any]) -> None:
    """fewshot_as_multiturn needs apply_chat_template (as lm-eval's config says); kind: hf
    under a chat template is sent as rendered text (api: completions), a chat server as
    messages (api: chat); a rolling task takes neither option."""
    from assay.errors import SpecError

    with pytest.raises(Exception, match="fewshot_as_multiturn: needs apply_chat_template"):
        _spec(world, _gsm(world, apply_chat_template=False, fewshot_as_multiturn=True))
    hf_chat = _gsm(world)
    hf_chat["generate"] = {**hf_chat["generate"], "api": "chat"}
    spec = _spec(world, hf_chat)
    with pytest.raises(SpecError, match="write generate: \\{api: completions"):
        spec.sources[0].build(spec.paths)
    srv = _gsm(world)
    srv["generate"] = {**srv["generate"], "model": {"kind": "openai", "model": "m",
                                                    "base_url": "http://127.0.0.1:9/v1"}}
    spec = _spec(world, srv)  # api: completions to a server: lm-eval would send messages
    with pytest.raises(SpecError, match="a chat server with generate: \\{api: chat\\}"):
        spec.sources[0].build(spec.paths)
    srv["generate"] = {**srv["generate"], "api": "chat", "system": "be brief"}
    spec = _spec(world, srv)  # the system prompt is lm-eval's (system_instruction)
    with pytest.raises(SpecError, match='write generate: \\{api: chat.*"system": "be brief"'):
        spec.sources[0].build(spec.paths)
    with pytest.raises(Exception, match="loglikelihood_rolling task scores documents"):
        _spec(world, {"name": "w", "kind": "lm_eval", "task": "gsm8k",
                      "apply_chat_template": True,
                      "perplexity": {"model": {"kind": "hf", "path": "m"}}})


def test_chat_options_key_the_rows(world: dict[str, Any]) -> None:
    """The rows' identity: unchanged for a source without the options, different for each
    option's value, and for a new chat template in the same model folder."""
    import shutil

    src = _gsm(world)
    plain = {k: v for k, v in src.items()
             if k not in ("apply_chat_template", "system_instruction")}

    def ident(s: dict[str, Any]) -> dict[str, Any]:
        spec = _spec(world, s)
        return spec.sources[0].identity(spec.paths)

    assert not {"apply_chat_template", "system_instruction", "fewshot_as_multiturn",
                "chat"} & set(ident(plain))
    base = ident(src)
    assert base["chat"]["multiturn"] is True and base["chat"]["render"] == "tokenizer"
    assert ident({**src, "fewshot_as_multiturn": False}) != base
    assert ident({**src, "system_instruction": "other"}) != base
    copy = world["base"] / "tiny_copy"
    shutil.copytree(world["model"], copy, dirs_exist_ok=True)
    moved = {**src, "generate": {**src["generate"],
                                 "model": {**src["generate"]["model"], "path": str(copy)}}}
    cfg = json.loads((copy / "tokenizer_config.json").read_text())
    first = ident(moved)
    assert first["chat"] == base["chat"]  # same template files, another folder
    cfg["chat_template"] = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    (copy / "tokenizer_config.json").write_text(json.dumps(cfg))
    (copy / "chat_template.jinja").unlink(missing_ok=True)
    assert ident(moved)["chat"] != base["chat"]


@pytest.mark.slow  # a second tiny model and one simple_evaluate run
def test_template_with_bos_is_not_given_a_second_one(world: dict[str, Any],
                                                     tmp_path: Path) -> None:
    """A tokenizer that adds BOS and a template that starts with it (as Llama 3's): lm-eval's
    HFLM adds no second BOS to the rendered text, and neither does assay (the responses and the
    prompt token counts equal HFLM's)."""
    from helpers.tiny_chat import CHAT_TEMPLATE, build_tiny_chat_lm
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
    from tokenizers import processors
    from transformers import AutoTokenizer

    from assay.stages import concat_rows, run_study
    from assay.store import Store

    model = build_tiny_chat_lm(tmp_path / "bos")
    tok = AutoTokenizer.from_pretrained(model)
    bos = tok.bos_token
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.bos_token_id)])
    tok.chat_template = "{{ bos_token }}" + CHAT_TEMPLATE
    tok.save_pretrained(model)
    tok = AutoTokenizer.from_pretrained(model)
    assert tok("x")["input_ids"][0] == tok.bos_token_id  # the tokenizer adds BOS itself

    lm = HFLM(pretrained=str(model), dtype="float32", batch_size=4, device="cpu")
    res = simple_evaluate(model=lm, tasks=["gsm8k"], log_samples=True, bootstrap_iters=0,
                          task_manager=TaskManager(include_path=str(world["tasks"]),
                                                   include_defaults=False),
                          fewshot_random_seed=1234, apply_chat_template=True,
                          num_fewshot=SHOTS, gen_kwargs={"max_gen_toks": MAX_GEN})
    by = _samples(res, "gsm8k")
    src = _gsm(world, system_instruction=None)
    src["generate"] = {**src["generate"], "model": {"kind": "hf", "path": str(model),
                                                    "dtype": "float32"}}
    store = Store(tmp_path / "store")
    run = run_study(_spec(world, src), store, progress=None)
    rows = sorted(concat_rows(store, run.graded["gsm"]), key=lambda r: int(r["task_id"]))
    assert len(rows) == 5
    for r in rows:
        s = by[int(r["task_id"])]
        assert r["prompt"] == s["arguments"][0][0] and r["prompt"].startswith(bos)
        assert r["markers"]["prompt_tokens"] == len(tok(r["prompt"], add_special_tokens=False)
                                                   ["input_ids"]), r["task_id"]
        assert r["final_text"] == s["resps"][0][0], r["task_id"]

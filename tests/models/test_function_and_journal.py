"""The function backend, the journal's torn-line handling, the retry time cap and spec errors."""

from __future__ import annotations

import sys
import textwrap
import warnings

import pytest
from helpers.openai_server import Fault
from pydantic import ValidationError

from assay.errors import GenerationError, SpecError
from assay.models import GenerateSpec, generate
from assay.store import CorruptEntryWarning

CALLS: list[dict] = []


def seeded(prompts, seeds, params):
    CALLS.append({"n": len(prompts), "seeds": list(seeds), "params": params})
    return [{"completion": f"{p[-1]['content']}#{s}", "finish_reason": "length",
             "completion_tokens": 3}
            if "fail" not in p[-1]["content"] else None for p, s in zip(prompts, seeds)]


def wrong_count(prompts):
    return ["x"]


def test_function_backend_gets_seeds_and_params_and_none_is_an_error_row(store):
    CALLS.clear()
    model = {"kind": "function", "callable": f"{__name__}:seeded"}
    g = generate(["a", "please fail", "b"], model, k=2, params={"temperature": 0.3}, store=store)
    assert CALLS[0]["n"] == 6 and CALLS[0]["params"]["temperature"] == 0.3
    assert CALLS[0]["params"]["max_tokens"] == 512  # every parameter, defaults included
    assert g.completions[0] == [f"a#{g.records[0]['seed']}", f"a#{g.records[1]['seed']}"]
    assert g.completions[1] == [None, None] and "returned None" in g.errors[0]["reason"]
    assert g.records[0]["finish_reason"] == "length" and g.records[0]["completion_tokens"] == 3
    again = generate(["a", "please fail", "b"], model, k=2, params={"temperature": 0.3},
                     store=store)
    assert again.sent == 2 and CALLS[-1]["n"] == 2  # only the error rows are asked again
    with pytest.raises(GenerationError, match="returned 1 completions for 2 prompts"):
        generate(["a", "b"], {"kind": "function", "callable": f"{__name__}:wrong_count"},
                 store=store)


def test_editing_the_function_recomputes(store, tmp_path, monkeypatch):
    mod = tmp_path / "mymodel.py"
    mod.write_text("def f(prompts):\n    return ['v1' for _ in prompts]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert generate(["q"], {"kind": "function", "callable": "mymodel:f"},
                    store=store).completions == [["v1"]]
    mod.write_text(textwrap.dedent("""
        def f(prompts):
            return ['v2' for _ in prompts]
    """))
    sys.modules.pop("mymodel")
    g = generate(["q"], {"kind": "function", "callable": "mymodel:f"}, store=store)
    assert g.sent == 1 and g.completions == [["v2"]]


def test_a_torn_journal_line_is_skipped_and_asked_again(store):
    model = {"kind": "function", "callable": "assay.models.function:echo"}
    generate(["a", "b", "c"], model, store=store)
    (path,) = (store.root / "journals").glob("*.jsonl")
    data = path.read_bytes()
    path.write_bytes(data[:-25])  # a write cut short by a kill
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        g = generate(["a", "b", "c"], model, store=store)
    assert g.sent == 1 and g.completions == [["a"], ["b"], ["c"]]
    assert any(issubclass(x.category, CorruptEntryWarning) and "1 torn" in str(x.message)
               for x in w)


def test_the_retry_time_cap_ends_retries(server, store):
    server.faults = lambda n, body: Fault(503, retry_after="5")
    g = generate(["q"], {"kind": "openai", "base_url": server.base_url, "model": "tiny-ckpt",
                         "retry_total_s": 1.0}, store=store)
    assert g.errors[0]["reason"] == "HTTP 503: injected; gave up after the 1s retry cap"
    assert server.count() == 1  # a Retry-After beyond the cap is not waited for


def test_spec_errors_name_the_field():
    with pytest.raises(ValidationError,
                       match="unknown model backend kind 'opneai' \\(did you mean 'openai'"):
        GenerateSpec.model_validate({"model": {"kind": "opneai"}})
    with pytest.raises(ValidationError, match="system prompt needs api: chat"):
        GenerateSpec.model_validate({"model": {"kind": "function", "callable": "m:f"},
                                     "api": "completions", "system": "x"})
    with pytest.raises(ValidationError, match="extra must not set \\['seed'\\]"):
        GenerateSpec.model_validate({"model": {"kind": "function", "callable": "m:f"},
                                     "params": {"extra": {"seed": 1}}})
    with pytest.raises(ValidationError, match="base_url 'localhost:8000' must start with http"):
        GenerateSpec.model_validate({"model": {"kind": "openai", "base_url": "localhost:8000",
                                               "model": "m"}})
    with pytest.raises(SpecError, match="OPENAI_KEY_UNSET_X"):
        generate(["q"], {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m",
                         "api_key_env": "OPENAI_KEY_UNSET_X"})
    with pytest.raises(GenerationError, match="cannot reach http://127.0.0.1:9/v1/models"):
        generate(["q"], {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"})


def breaks_on_second_chunk(prompts):
    if any("boom" in p[-1]["content"] for p in prompts):
        raise RuntimeError("the model crashed")
    return ["ok" for _ in prompts]


def test_function_backend_commits_each_sample_once_and_a_raise_ends_the_call(store, monkeypatch):
    from assay.models import function
    from assay.progress import listen

    monkeypatch.setattr(function, "CHUNK", 4)
    model = {"kind": "function", "callable": f"{__name__}:breaks_on_second_chunk"}
    seen = []
    stop = listen(lambda s: seen.append(s) if s.label == "fn" else None)
    try:
        g = generate([f"q{i}" for i in range(6)] + ["a", "b"], model, k=1, store=store, label="fn")
        with pytest.raises(RuntimeError, match="the model crashed"):
            generate([f"p{i}" for i in range(4)] + ["boom", "c"], model, k=1, store=store,
                     label="fn")
    finally:
        stop()
    assert not g.errors and [s.done for s in seen if not s.finished][:8] == list(range(1, 9))
    # the call that raised committed its first chunk (4 samples), once each, then ended
    (path,) = (store.root / "journals").glob("*.jsonl")
    keys = [line.split(b'"key":"')[1][:20] for line in path.read_bytes().splitlines()]
    assert len(keys) == 12 == len(set(keys))
    assert seen[-1].finished and seen[-1].done == 4 and seen[-1].total == 6

"""`--set PATH=VALUE`, `--model`, `--revision`: applied to the spec document before validation;
every bad path names the flag, the path and what is there."""

from __future__ import annotations

import pytest

from assay.errors import SpecError
from assay.overrides import apply_overrides, checkpoint_overrides
from assay.spec import parse_spec

SPEC = """
name: o
sources:
  - name: a
    kind: file
    path: a.jsonl
    fields: {prompt: q, reference: gold}
    generate: {model: {kind: openai, base_url: "http://h:1/v1", model: c1}, k: 2}
    verifier: {kind: numeric}
  - name: b
    kind: file
    path: b.jsonl
    fields: {prompt: q, reference: gold}
    generate: {model: {kind: hf, path: /ckpt/one}}
    verifier: {kind: numeric}
  - name: c
    kind: file
    path: c.jsonl
    fields: {reward: r}
"""


def test_checkpoint_flags_set_every_generating_source_by_its_backend() -> None:
    s = parse_spec(SPEC, overrides=checkpoint_overrides("ckpt-2", "step-7000"))
    a, b, c = s.sources
    assert (a.generate.model.model, a.generate.model.revision) == ("ckpt-2", "step-7000")
    assert (b.generate.model.path, b.generate.model.revision) == ("ckpt-2", "step-7000")
    assert getattr(c, "generate", None) is None
    # the model under test is not the study: same definition, another results checksum
    assert s.definition_checksum() == parse_spec(SPEC).definition_checksum()


def test_typed_values_named_sources_indexes_and_later_wins() -> None:
    s = parse_spec(SPEC, overrides=[
        "generate.params.temperature=0", "sources.a.generate.k=4", "sources[1].generate.seed=7",
        "nightly.baseline=2026-12-01", "nightly.must_not_regress=[pass@1, truncated]",
        "generate.params.temperature=0.5"])
    assert [x.generate.params.temperature for x in s.sources[:2]] == [0.5, 0.5]
    assert s.sources[0].generate.k == 4 and s.sources[1].generate.seed == 7
    assert s.nightly.baseline == "2026-12-01"  # YAML would read a date: kept as the text
    assert s.nightly.must_not_regress == ["pass@1", "truncated"]
    # the sampling parameters are the model under test: the study definition does not move
    assert s.definition_checksum() == parse_spec(SPEC, overrides=["sources.a.generate.k=4",
                                                                  "sources[1].generate.seed=7",
                                                                  ]).definition_checksum()


@pytest.mark.parametrize("items, message", [
    (["generate.model.base_url"], "--set 'generate.model.base_url': give PATH=VALUE"),
    (["sources.zz.generate.k=2"], "no source named 'zz'; sources are ['a', 'b', 'c']"),
    (["sources[7].name=x"], "--set 'sources[7].name=x': sources has no item [7]"),
    (["name.first=x"], "name is not a mapping, so it has no field 'first'"),
    (["generate.k=[1"], "the value is not valid YAML"),
    (["sources..k=1"], "cannot read the path"),
])
def test_bad_overrides_name_the_flag_and_the_path(items: list[str], message: str) -> None:
    with pytest.raises(SpecError, match=None) as e:
        apply_overrides(parse_spec(SPEC).model_dump(mode="json"), items)
    assert message in str(e.value)


def test_model_flag_on_a_backend_without_a_checkpoint_name() -> None:
    text = SPEC.replace("{kind: hf, path: /ckpt/one}", "{kind: function, callable: 'm:f'}")
    with pytest.raises(SpecError, match=r"--model 'c9': sources\.b\.generate\.model is a "
                                        r"'function' backend"):
        parse_spec(text, overrides=checkpoint_overrides("c9", None))


def test_misspelled_field_fails_validation_and_names_the_overrides() -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(SPEC, overrides=["generate.model.revison=x"])
    assert "sources[0].generate.model" in str(e.value) and "revison" in str(e.value)
    assert "(the spec as overridden by ['generate.model.revison=x'])" in str(e.value)


def test_judge_model_is_under_test_its_rubric_is_the_study() -> None:
    judge = ("    verifier: {kind: judge, params: {model: {kind: openai, base_url: 'http://j/v1', "
             "model: J}, template: correct_incorrect}}\n")
    text = SPEC.replace("    verifier: {kind: numeric}\n  - name: b", judge + "  - name: b", 1)
    s = parse_spec(text)
    assert s.model_under_test()["a"]["judge"]["model"] == "J"
    other_judge = parse_spec(text, overrides=["sources.a.verifier.params.model.model=J2"])
    assert other_judge.definition_checksum() == s.definition_checksum()
    rubric = parse_spec(text, overrides=["sources.a.verifier.params.template="
                                         "'Q {question} A {answer}'"])
    assert rubric.definition_checksum() != s.definition_checksum()
    prompts = parse_spec(text, overrides=["sources.a.generate.system=Be brief."])
    assert prompts.definition_checksum() != s.definition_checksum()

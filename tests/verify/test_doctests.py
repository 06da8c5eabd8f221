"""The runnable examples in the docstrings of CodeExec's modules and of the guard count."""

import doctest
import importlib

import pytest

from assay import report

MODULES = ["assay.verify.boundary", "assay.verify.sandbox", "assay.verify.code"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_guard_counts_example():
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(report.guard_counts, "guard_counts", globs=vars(report)):
        runner.run(test)
    assert runner.failures == 0 and runner.tries > 0

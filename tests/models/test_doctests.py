"""The runnable examples in the docstrings of assay.models and the judge verifier."""

import doctest
import importlib

import pytest

MODULES = ["assay.models.generation", "assay.models.journal", "assay.models.base", "assay.models.specs",
           "assay.models.entry", "assay.stages.report",
           "assay.models.openai", "assay.models.function", "assay.models.hf", "assay.verify.judge",
           "assay.verify.trust"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0

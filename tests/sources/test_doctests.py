"""The runnable examples in the docstrings of the source kinds, the function verifier and the
row-field reader."""

import doctest
import importlib

import pytest

MODULES = ["assay.sources.records", "assay.sources.templates", "assay.sources.hf_dataset",
           "assay.sources.hub", "assay.verify.function", "assay.rowfields"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0

"""The runnable examples in assay.measure's docstrings."""

import doctest
import importlib

import pytest

MODULES = ["__init__", "passk", "comparison", "variance", "sizing", "selection", "signflip", "intervals",
           "grouping", "categories"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module("assay.measure" if name == "__init__" else f"assay.measure.{name}")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and (result.attempted > 0 or name == "grouping")

"""The runnable examples in the nightly and store-upkeep modules' docstrings."""

import doctest
import importlib

import pytest

MODULES = ["assay.nightly.spec", "assay.nightly.gates", "assay.nightly.history",
           "assay.nightly.notify", "assay.upkeep", "assay.store"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0

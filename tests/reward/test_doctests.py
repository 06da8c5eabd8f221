"""The runnable examples in the docstrings of the reward-rows and preference-data modules and
the score-rows stage."""

import doctest
import importlib

import pytest

MODULES = ["assay.reward.rowstats", "assay.reward.prefdata", "assay.stages.score_rows"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0

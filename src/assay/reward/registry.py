"""The reward-model registry: every ``kind`` a spec's ``reward.models`` entry can name.

A kind is a spec model with ``build(paths)`` (the adapter) and ``identity(paths)`` (its cache
key), given the spec's paths context (:class:`assay.paths.SpecPaths`); each kind's class is its
own spec model (``@REWARD_MODELS.register("name")`` on the class).
"""

from __future__ import annotations

from assay.registry import Registry
from assay.specbase import SpecModel

# typed by the spec models' common base: the kinds' own modules import this one to register
# (naming their classes here would tie each pair of modules in a cycle)
REWARD_MODELS: Registry[type[SpecModel]] = Registry("reward model", self_spec=True)

#: Kinds of ``reward.data`` (the preference data an audit reads): builtin, file, hf_dataset.
PREFERENCE_DATA: Registry[type[SpecModel]] = Registry("preference data", self_spec=True)

"""The reward-model registry: every ``kind`` a spec's ``reward.models`` entry can name.

A kind is a spec model with ``build(paths)`` (the adapter) and ``identity(paths)`` (its cache
key), given the spec's paths context (:class:`assay.paths.SpecPaths`); each kind's class is its
own spec model (``@REWARD_MODELS.register("name")`` on the class).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from assay.registry import Registry

if TYPE_CHECKING:
    from assay.reward.kinds import RewardModelEntry
    from assay.reward.prefdata import PreferenceData

REWARD_MODELS: Registry[type[RewardModelEntry]] = Registry("reward model", self_spec=True)

#: Kinds of ``reward.data`` (the preference data an audit reads): builtin, file, hf_dataset.
PREFERENCE_DATA: Registry[type[PreferenceData]] = Registry("preference data", self_spec=True)

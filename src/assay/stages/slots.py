"""Which resource slots a model holds while a node uses it: ``gpu`` for any local model, and
``cores`` too when it runs on the CPU; a model server holds none (its connections are its pool).

Example:
    >>> model_slots(["cpu"]), model_slots(["cuda:0"]), model_slots([])
    (('gpu', 'cores'), ('gpu',), ())
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from assay.spec import StudySpec


def model_device(model: object) -> str | None:
    """Where ``model`` (a spec entry) runs here, or None (a server, a Python function): a
    spec that runs in this process says where with ``local_device()``."""
    where = getattr(model, "local_device", None)  # optional on a plugin's spec class
    return where() if callable(where) else None


def device_of(built: object) -> str:
    """Where a built model, backend or scorer runs (``cuda:0``, ``cpu``; ``cpu`` when it does
    not say: a plugin's object may not), for the device slot a node holds while it works."""
    return str(getattr(built, "device", "cpu"))  # optional on a plugin's object


def on_cpu(device: str | None) -> bool:
    """Whether a model with this ``device`` setting runs on the CPU. ``auto`` is decided without
    importing torch (a fully cached rerun never loads it): no NVIDIA device node, no GPU."""
    d = str(device or "auto")
    if d == "auto":
        return not os.path.exists("/dev/nvidiactl")
    return not d.startswith("cuda")


def model_slots(devices: Iterable[str | None]) -> tuple[str, ...]:
    """A model holds the ``gpu`` slot (one model at a time); on the CPU it also holds ``cores``:
    its threads and the grading workers would otherwise fight over the same cores (scoring
    next to grading on a small machine was slower than one after the other)."""
    devices = list(devices)
    if not devices:
        return ()
    return ("gpu", "cores") if any(on_cpu(d) for d in devices) else ("gpu",)


def models_slots(models: Iterable[object]) -> tuple[str, ...]:
    """The slots of local models among ``models`` (none for servers and functions)."""
    return model_slots(d for d in map(model_device, models) if d is not None)


def scoring_model_slots(spec: StudySpec, source: str) -> tuple[str, ...]:
    """A choices or perplexity source's scoring model: a local one holds the model slots."""
    return models_slots([spec.source(source).scoring_model])


def scoring_slots(models: Iterable[object]) -> tuple[str, ...]:
    """Reward models' slots; a ``function`` scorer is plain Python: the ``gpu`` slot only."""
    return models_slots(models) or ("gpu",)

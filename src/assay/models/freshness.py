"""Whether a night may reuse earlier nights' completions: only when the model's identity is proven.

A server's ``/v1/models`` answer cannot prove which weights stand behind a served name, so a nightly
asks afresh each night unless the identity is proven or the user vouches for it.

Proven: an ``hf`` model (the checksum of every weight, config and tokenizer file), a ``function``
(its source code's hash and revision), an ``openai`` entry whose pinned ``revision`` the user
declares ``revision_immutable``. Vouched: ``generate.reuse: across_nights``. Otherwise every
completion key of the night carries a scope ``night:<date>``: a rerun of the same night (after a
kill, a failure, a manual rerun) resumes from what that night already answered, and the next night
starts clean.

Example:
    >>> served = {"backend": "openai", "model": "my-ckpt", "revision": None, "served": {}}
    >>> reuse_scope(served, {"kind": "openai", "revision_immutable": False}, "auto", "2026-12-02")
    'night:2026-12-02'
    >>> reuse_scope({"backend": "hf", "files_sha256": "ab"}, {"kind": "hf"}, "auto", "2026-12-02")
    >>> reuse_scope(served, {"kind": "openai"}, "across_nights", "2026-12-02")
    >>> pinned = {"kind": "openai", "revision": "step-7000", "revision_immutable": True}
    >>> reuse_scope(served, pinned, "auto", "2026-12-02"), identity_proven(served, pinned)
    (None, 'revision step-7000 declared immutable')
    >>> reuse_scope(served, {"kind": "openai"}, "auto", None)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from assay.models.specs import ModelEntry


def identity_proven(identity: Mapping[str, object], model: ModelEntry) -> str | None:
    """Why ``identity`` proves the weights unchanged (a short reason), or None when it does not."""
    entry = model.model_dump(mode="json") if hasattr(model, "model_dump") else dict(model)
    backend = identity.get("backend") or entry.get("kind")
    if backend == "hf" and identity.get("files_sha256"):
        return "hf weights checksum"
    if backend == "function" and identity.get("source_sha256"):
        return "function source hash"
    if entry.get("revision_immutable") and entry.get("revision"):
        return f"revision {entry['revision']} declared immutable"
    return None


def reuse_scope(identity: Mapping[str, object], model: ModelEntry, reuse: str,
                night: str | None) -> str | None:
    """The scope added to every completion key, or None (keys as in a plain run). Only a
    nightly (``night`` given) scopes keys, and only when the identity is neither proven nor
    vouched for (``reuse: across_nights``)."""
    if night is None or reuse == "across_nights" or identity_proven(identity, model):
        return None
    return f"night:{night}"

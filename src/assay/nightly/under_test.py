"""What was under test in a run: per source the served model, its identity, revision, sampling
parameters and judge, read from the spec and the generate stages' records (run.json, nightly).

Example:
    >>> rec = under_test_record({"model": {"kind": "openai", "base_url": "http://h/v1",
    ...     "model": "c2", "revision": "step-7", "revision_immutable": False},
    ...     "params": {"temperature": 0.7, "top_p": 1.0, "max_tokens": 64, "stop": [],
    ...                "presence_penalty": 0.0, "frequency_penalty": 0.0, "extra": {}}, "k": 4},
    ...     [{"identity": {"backend": "openai"}, "served": {"listed": True,
    ...       "entry": {"root": "/ckpt/latest"}}, "scope": None, "sent": 3}])
    >>> rec["model"], rec["revision"], rec["served_root"], rec["sampling"]
    ('c2', 'step-7', '/ckpt/latest', 'k=4 T=0.7 top_p=1 max_tokens=64')
    >>> model_label(rec) == 'c2@step-7 #' + rec["identity"][:8]
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from assay.hashing import content_hash

#: Fields of a record that say which model ran; a change of any is named in the night's output.
MODEL_FIELDS = ("backend", "model", "revision", "base_url", "identity", "sampling", "judge")


def _g(x: float) -> str:
    return format(x, "g")


def sampling_label(params: Mapping[str, Any] | None, k: int | None) -> str:
    """``k=4 T=0.7 top_p=0.95 max_tokens=512`` (+ stop, penalties and extra when set)."""
    if not params:
        return "-"
    out = [f"k={k}"] if k is not None else []
    out += [f"T={_g(params['temperature'])}", f"top_p={_g(params['top_p'])}",
            f"max_tokens={params['max_tokens']}"]
    if params.get("stop"):
        out.append(f"stop={params['stop']!r}")
    for f in ("presence_penalty", "frequency_penalty"):
        if params.get(f):
            out.append(f"{f}={_g(params[f])}")
    for name, v in sorted((params.get("extra") or {}).items()):
        out.append(f"{name}={v}")
    return " ".join(out)


def judge_label(judge: Mapping[str, object] | None) -> str | None:
    """``openai:gpt-judge@rev`` for a judge model entry, or None."""
    if not judge:
        return None
    name = judge.get("model") or judge.get("path") or judge.get("callable") or "?"
    rev = f"@{judge['revision']}" if judge.get("revision") else ""
    return f"{judge.get('kind', '?')}:{name}{rev}"


def under_test_record(entry: Mapping[str, Any],
                      gens: Sequence[Mapping[str, Any]]) -> dict[str, object]:
    """One source's record: ``entry`` from :meth:`StudySpec.model_under_test`, ``gens`` the
    summaries of its generate shards this run (each with ``identity``, ``scope``, ``sent``)."""
    model = entry.get("model") or {}
    idents = [g["identity"] for g in gens if g.get("identity") is not None]
    distinct = {content_hash(i, "ident") for i in idents}
    ident = idents[0] if idents else {}
    # the listing a shard recorded (``served``: {"listed", "entry"}), or an older record's
    # identity that held the listed entry itself
    listing = next((g["served"] for g in gens if isinstance(g.get("served"), dict)), None)
    raw = (listing or {}).get("entry") if listing is not None else ident.get("served")
    served: dict[str, object] = raw if isinstance(raw, dict) else {}
    return {
        "backend": model.get("kind"),
        "model": model.get("model") or model.get("path") or model.get("callable"),
        "revision": model.get("revision"),
        "base_url": model.get("base_url"),
        "served_root": served.get("root"),
        "files_sha256": ident.get("files_sha256"),
        # one hash of everything the backend reports about the checkpoint; "mixed" when the
        # shards of one night saw different identities (weights swapped mid-run)
        "identity": (sorted(distinct)[0].split(":", 1)[1][:16] if len(distinct) == 1
                     else "mixed" if distinct else None),
        "sampling": sampling_label(entry.get("params"), entry.get("k")),
        "judge": judge_label(entry.get("judge")),
        "scope": next((g.get("scope") for g in gens if g.get("scope")), None),
        "sent": sum(int(g.get("sent") or 0) for g in gens),
    }


def records_of(model_under_test: Mapping[str, Mapping[str, Any]],
               generation: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, object]]:
    """Per source, its record; ``generation``: run.json's ``generation`` (label -> summary, with
    ``sent`` this run), labels ``<source> shard i/n``."""
    out = {}
    for src, entry in model_under_test.items():
        gens = [g for label, g in generation.items() if label.rsplit(" shard ", 1)[0] == src]
        out[src] = under_test_record(entry, gens)
    return out


def model_label(rec: Mapping[str, Any] | None) -> str:
    """``c2@step-7 #1a2b3c4d``: the served model, its revision and its identity's hash."""
    if not rec:
        return "-"
    out = str(rec.get("model") or rec.get("backend") or "-")
    if rec.get("revision"):
        out += f"@{rec['revision']}"
    if rec.get("identity"):
        out += f" #{rec['identity'][:8]}"
    return out


def model_changes(before: Mapping[str, object] | None, after: Mapping[str, object] | None
                  ) -> list[str]:
    """``["model: c1 -> c2", ...]``: the fields of :data:`MODEL_FIELDS` that differ."""
    if not before or not after:
        return []
    return [f"{f}: {before.get(f) or '-'} -> {after.get(f) or '-'}" for f in MODEL_FIELDS
            if before.get(f) != after.get(f)]

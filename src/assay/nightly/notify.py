"""Regression alerts: one message per night and target, naming study, metric, delta, interval.

Webhook URLs are posted here (httpx); Prefect notification blocks are sent by flows/nightly.py.

Example:
    >>> r = {"study": "s", "source": "m", "metric": "pass@1", "night": "2026-11-03",
    ...      "baseline": "2026-11-02", "delta": -0.25, "low": -0.34, "high": -0.16,
    ...      "p_adjusted": 0.0001}
    >>> subject, body = alert_text([r])
    >>> subject
    'assay nightly 2026-11-03: 1 regression (s)'
    >>> body.splitlines()[0][:62]
    's/m/pass@1: delta -0.250 [-0.340, -0.160] vs 2026-11-02: worse'
    >>> body.splitlines()[0][62:]
    ' by the two-sided exact sign-flip test (Holm-adjusted p 0.0001)'
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from assay.errors import NotifyError
from assay.nightly.gates import regression_line


def alert_text(regressions: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """(subject, body) of the alert for these regressions (one night)."""
    night = regressions[0]["night"]
    studies = sorted({r["study"] for r in regressions})
    n = len(regressions)
    subject = f"assay nightly {night}: {n} regression{'s' * (n != 1)} ({', '.join(studies)})"
    return subject, "\n".join(regression_line(r) for r in regressions)


def alert_payload(regressions: Sequence[Mapping[str, Any]]) -> dict[str, object]:
    """The JSON a webhook receives: ``text`` (chat tools show it) and the structured records."""
    subject, body = alert_text(regressions)
    return {"text": f"{subject}\n{body}", "subject": subject,
            "regressions": [dict(r) for r in regressions]}


def post_webhook(url: str, regressions: Sequence[Mapping[str, Any]], *, timeout: float = 10.0,
                 attempts: int = 3) -> None:
    """POST the alert as JSON; retries 408/429/5xx and connection errors, then NotifyError."""
    post_json(url, alert_payload(regressions), timeout=timeout, attempts=attempts,
              what="the regression alert")


def stopped_alert(study: str, night: str, message: str,
                  what: str = "run stopped") -> tuple[str, str, dict[str, object]]:
    """(subject, body, webhook JSON) of the alert for a night whose run was stopped (deadline,
    stall, SIGTERM) or failed outright (``what``: ``run failed``): no verdict, the night is
    missing, which is as loud. The JSON's ``stopped`` or ``failed`` record says which.

    Example:
        >>> subject, body, doc = stopped_alert("s", "2026-11-03", "stopped by execution.deadline")
        >>> subject, doc["stopped"]["study"]
        ('assay nightly 2026-11-03: run stopped (s)', 's')
    """
    subject = f"assay nightly {night}: {what} ({study})"
    body = f"{study}: {message}"
    key = {"run failed": "failed", "partial night": "partial", "run crashed": "crashed"}.get(
        what, "stopped")
    return subject, body, {"text": f"{subject}\n{body}", "subject": subject,
                           key: {"study": study, "night": night, "message": message}}


def post_json(url: str, payload: Mapping[str, object], *, timeout: float = 10.0, attempts: int = 3,
              what: str = "the alert") -> None:
    """POST ``payload``; retries 408/429/5xx and connection errors, then NotifyError."""
    import time

    import httpx

    last = ""
    for i in range(attempts):
        try:
            r = httpx.post(url, json=dict(payload), timeout=timeout)
        except httpx.TransportError as e:
            last = f"{type(e).__name__}: {e}"
        else:
            if r.status_code < 300:
                return
            last = f"HTTP {r.status_code}: {r.text[:200]}"
            if r.status_code not in (408, 429) and r.status_code < 500:
                break
        time.sleep(0.5 * 2**i)
    raise NotifyError(f"nightly.notify: posting {what} to {url} failed ({last})")


# ------------------------------------------------------------------------------- sent once


def alert_key(target: str, regressions: Sequence[Mapping[str, Any]]) -> str:
    """The identity of one alert: target, night and verdict (which study/source/metric
    regressed against which baseline night), not the numbers: a rerun of the night that reaches
    the same verdict is the same alert.

    Example:
        >>> r = {"study": "s", "source": "m", "metric": "pass@1", "night": "2026-11-03",
        ...      "baseline": "2026-11-02", "delta": -0.25}
        >>> alert_key("http://h", [r]) == alert_key("http://h", [{**r, "delta": -0.3}])
        True
    """
    from assay.hashing import content_hash

    verdict = sorted([r["study"], r["source"], r["metric"], r["night"], r["baseline"]]
                     for r in regressions)
    return content_hash([target, verdict], "alert")


def _ledger(root: str | os.PathLike[str], night: str) -> Path:
    return Path(root) / ".alerts" / f"{night}.json"


def already_sent(root: str | os.PathLike[str], night: str, key: str) -> bool:
    """Whether alert ``key`` of ``night`` was delivered before (``<root>/.alerts/<night>.json``)."""
    try:
        return key in json.loads(_ledger(root, night).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError, TypeError):
        return False


def record_sent(root: str | os.PathLike[str], night: str, key: str, target: str) -> None:
    """Remember that alert ``key`` was delivered to ``target`` (written atomically)."""
    from assay.store import atomic_write

    path = _ledger(root, night)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        doc = doc if isinstance(doc, dict) else {}
    except (FileNotFoundError, ValueError):
        doc = {}
    doc[key] = target
    atomic_write(path, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())

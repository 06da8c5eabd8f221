"""Regression alerts: one message per night and target, naming study, metric, delta, interval.

Webhook URLs are posted here (httpx); Prefect notification blocks are sent by flows/nightly.py.

Example:
    >>> r = {"study": "s", "source": "m", "metric": "pass@1", "night": "2026-11-03",
    ...      "baseline": "2026-11-02", "delta": -0.25, "low": -0.34, "high": -0.16, "p_adjusted": 0.0001}
    >>> subject, body = alert_text([r])
    >>> subject
    'assay nightly 2026-11-03: 1 regression (s)'
    >>> body.splitlines()[0]
    's/m/pass@1: delta -0.250 [-0.340, -0.160] vs 2026-11-02 (Holm p 0.0001)'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


def alert_payload(regressions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The JSON a webhook receives: ``text`` (chat tools show it) and the structured records."""
    subject, body = alert_text(regressions)
    return {"text": f"{subject}\n{body}", "subject": subject,
            "regressions": [dict(r) for r in regressions]}


def post_webhook(url: str, regressions: Sequence[Mapping[str, Any]], *, timeout: float = 10.0,
                 attempts: int = 3) -> None:
    """POST the alert as JSON; retries 408/429/5xx and connection errors, then NotifyError."""
    import time

    import httpx

    payload = alert_payload(regressions)
    last = ""
    for i in range(attempts):
        try:
            r = httpx.post(url, json=payload, timeout=timeout)
        except httpx.TransportError as e:
            last = f"{type(e).__name__}: {e}"
        else:
            if r.status_code < 300:
                return
            last = f"HTTP {r.status_code}: {r.text[:200]}"
            if r.status_code not in (408, 429) and r.status_code < 500:
                break
        time.sleep(0.5 * 2**i)
    raise NotifyError(f"nightly.notify: posting the regression alert to {url} failed ({last})")

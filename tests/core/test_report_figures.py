"""The report's figures: the same PNG bytes as matplotlib's own tight layout, drawn once.

Reference: ``Figure.tight_layout()`` then ``savefig`` (what the report did before), on the
report's own estimate plot.
"""

from __future__ import annotations

import io

from assay import report


def _estimates() -> list[dict]:
    return [{"label": f"source {i} rm:minilm: best-of-n", "value": 0.3 + i / 20, "low": 0.2,
             "high": 0.8, "n": 64, "name": "best-of-n"} for i in range(6)]


def test_png_bytes_equal_tight_layout_and_draw_once(monkeypatch):
    from matplotlib.figure import Figure

    def reference(fig):
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", metadata={"Software": None})
        return buf.getvalue()

    draws = []
    draw = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda self, r: (draws.append(1), draw(self, r))[1])
    ours = report._plot_estimates("title", _estimates(), "rate")
    assert len(draws) == 1  # savefig's own draw, no second one for a layout engine
    monkeypatch.setattr(report, "png_bytes", reference)
    ref = report._plot_estimates("title", _estimates(), "rate")
    assert ours is not None and ours[:4] == b"\x89PNG" and ours == ref
    assert len(draws) == 3  # the reference draws twice

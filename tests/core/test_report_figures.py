"""The report's figures: the same PNG bytes as matplotlib's own tight layout, drawn once; drawn
side by side in forked children, the same bytes as one after another, whatever a child does.

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


def _jobs() -> list[tuple]:
    ests = _estimates()
    return [("a", ests, "rate"), ("b", [], "none to draw"), ("c", ests[:3], "rate"),
            ("d", ests[2:], "rate", [0.5, None, 0.4, 0.6])]


def test_figures_drawn_side_by_side_are_the_same_bytes(monkeypatch):
    from assay import grading

    serial = [report._plot_estimates(*j) for j in _jobs()]
    forked = []
    real_fork = report.os.fork

    def fork():
        pid = real_fork()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(report.os, "fork", fork)
    monkeypatch.setattr(grading, "cores", lambda: 3)  # three ways: two children
    assert report.render_plots(_jobs()) == serial
    assert len(forked) == 2 and serial[1] is None


def _child_misbehaves(monkeypatch, how):
    import os
    import time

    from assay import grading

    parent = os.getpid()
    real = report._plot_estimates

    def plot(*a):
        if os.getpid() != parent:
            if how == "dies":
                os._exit(3)
            if how == "hangs":
                time.sleep(3600)
            raise RuntimeError("a bug in a figure")
        return real(*a)

    monkeypatch.setattr(report, "_plot_estimates", plot)
    monkeypatch.setattr(grading, "cores", lambda: 2)
    monkeypatch.setattr(report, "RENDER_BOUND_S", 1.0)


def test_a_child_that_dies_fails_or_hangs_has_its_figures_drawn_here(monkeypatch):
    serial = [report._plot_estimates(*j) for j in _jobs()]
    for how in ("dies", "raises", "hangs"):
        with monkeypatch.context() as m:
            _child_misbehaves(m, how)
            assert report.render_plots(_jobs()) == serial, how


def test_no_report_forks_while_another_thread_draws(monkeypatch):
    """Two studies reporting at once in one process: a fork while the other thread is inside
    matplotlib would copy its held locks into the child (a child that hangs until
    RENDER_BOUND_S). Thread A waits inside its drawing until B forks (old code: at once) or 3 s
    pass (a lock keeps B out): B's fork must never see A inside."""
    import os
    import threading

    from assay import grading

    parent = os.getpid()
    real_plot, real_fork = report._plot_estimates, report.os.fork
    inside = threading.Event()
    forked = threading.Event()
    seen: list[bool] = []
    a_thread: list[threading.Thread] = []  # thread A, once made

    def plot(*args):
        if os.getpid() == parent and threading.current_thread() is a_thread[0] \
                and not inside.is_set():
            inside.set()
            forked.wait(3.0)  # the old code forks from B meanwhile
            got = real_plot(*args)
            inside.clear()
            return got
        return real_plot(*args)

    def fork():
        if os.getpid() == parent and threading.current_thread() is not a_thread[0]:
            seen.append(inside.is_set())
            forked.set()
        return real_fork()

    monkeypatch.setattr(report, "_plot_estimates", plot)
    monkeypatch.setattr(report.os, "fork", fork)
    monkeypatch.setattr(grading, "cores", lambda: 2)
    serial = [real_plot(*j) for j in _jobs()]
    out: dict[str, list] = {}
    a_thread.append(threading.Thread(target=lambda: out.setdefault("a", report.render_plots(
        _jobs()))))
    a_thread[0].start()
    assert inside.wait(30)
    b = threading.Thread(target=lambda: out.setdefault("b", report.render_plots(_jobs())))
    b.start()
    a_thread[0].join(60)
    b.join(60)
    assert out == {"a": serial, "b": serial}
    assert seen and not any(seen), seen

"""The curves tool (trainers/plots.py) behaviour the earlier tests left unpinned (mutation round 20)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.trainers import plots


def test_a_logged_bool_is_not_plotted_as_a_number(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """True/False in a metrics row (a flag, not a measurement) is left out like a null, not plotted as 1/0."""
    import matplotlib.axes

    (tmp_path / "metrics.jsonl").write_text("{}\n")
    rows = [{"step": 1, "k": True}, {"step": 2, "k": 0.5}, {"step": 3, "k": False}, {"step": 4, "k": 1}]
    monkeypatch.setattr(plots, "read_metrics", lambda path: rows)
    drawn = []
    real = matplotlib.axes.Axes.plot
    monkeypatch.setattr(
        matplotlib.axes.Axes, "plot", lambda ax, *a, **k: (drawn.append(a[:2]), real(ax, *a, **k))[1]
    )
    plots.plot_metrics(tmp_path, ["k"], out=tmp_path / "c.png")
    assert drawn == [((2, 4), (0.5, 1.0))]


def test_points_are_drawn_in_step_order_whatever_the_row_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows out of step order (evaluations merged after the training rows) are drawn sorted by step, so the line
    does not jump back and forth."""
    import matplotlib.axes

    (tmp_path / "metrics.jsonl").write_text("{}\n")
    rows = [{"step": s, "reward/r/mean": float(s)} for s in (3, 1, 2)]
    monkeypatch.setattr(plots, "read_metrics", lambda path: rows)
    drawn = []
    real = matplotlib.axes.Axes.plot
    monkeypatch.setattr(
        matplotlib.axes.Axes, "plot", lambda ax, *a, **k: (drawn.append(a[:2]), real(ax, *a, **k))[1]
    )
    plots.plot_metrics(tmp_path, out=tmp_path / "c.png")
    assert drawn == [((1, 2, 3), (1.0, 2.0, 3.0))]

"""The curves tool (trainers/plots.py) behaviour the earlier tests left unpinned (mutation round 20)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.trainers import plots


def test_a_logged_bool_is_not_plotted_as_a_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plot_calls: tuple[list, list]
) -> None:
    """True/False in a metrics row (a flag, not a measurement) is left out like a null, not plotted as 1/0."""
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    rows = [{"step": 1, "k": True}, {"step": 2, "k": 0.5}, {"step": 3, "k": False}, {"step": 4, "k": 1}]
    monkeypatch.setattr(plots, "read_metrics", lambda path: rows)
    plots.plot_metrics(tmp_path, ["k"], out=tmp_path / "c.png")
    assert [a[:2] for a, _ in plot_calls[0]] == [((2, 4), (0.5, 1.0))]


def test_points_are_drawn_in_step_order_whatever_the_row_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plot_calls: tuple[list, list]
) -> None:
    """Rows out of step order (evaluations merged after the training rows) are drawn sorted by step, so the line
    does not jump back and forth."""
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    rows = [{"step": s, "reward/r/mean": float(s)} for s in (3, 1, 2)]
    monkeypatch.setattr(plots, "read_metrics", lambda path: rows)
    plots.plot_metrics(tmp_path, out=tmp_path / "c.png")
    assert [a[:2] for a, _ in plot_calls[0]] == [((1, 2, 3), (1.0, 2.0, 3.0))]

"""trainers/plots.py: the moving average, the panel titles and where the curves go (mutation round 22)."""

from __future__ import annotations

import pytest

from imgalign.trainers import plots
from tests.conftest import metrics_run


def test_twenty_points_get_a_moving_average_over_the_last_smooth_points(tmp_path, plot_calls) -> None:
    """From 20 points on, a `smooth`-step mean is drawn: over the points so far while fewer than `smooth`."""
    drawn, _ = plot_calls
    run = metrics_run(tmp_path, [{"step": s, "reward/r/mean": float(s)} for s in range(20)])
    plots.plot_metrics(run, out=tmp_path / "c.png", smooth=3)
    assert len(drawn) == 2
    (xs, avg, _), kw = drawn[1]
    assert kw["label"] == "3-step mean" and xs == tuple(range(20))
    assert avg == pytest.approx([0.0, 0.5, 1.0] + [float(i - 1) for i in range(3, 20)])


def test_nineteen_points_are_drawn_as_points_without_an_average(tmp_path, plot_calls) -> None:
    drawn, _ = plot_calls
    plots.plot_metrics(
        metrics_run(tmp_path, [{"step": s, "reward/r/mean": 1.0} for s in range(19)]), out=tmp_path / "c.png"
    )
    assert len(drawn) == 1 and drawn[0][0][2] == "o-"


def test_a_panel_without_a_value_says_whether_the_key_was_logged(tmp_path, plot_calls) -> None:
    _, titles = plot_calls
    run = metrics_run(tmp_path, [{"step": 1, "reward/r/mean": None}])
    plots.plot_metrics(run, ["reward/r/mean", "reward/s/mean"], out=tmp_path / "c.png")
    assert titles == ["reward/r/mean (no finite value)", "reward/s/mean (absent)"]


def test_the_curves_of_a_metrics_file_go_beside_it(tmp_path) -> None:
    run = metrics_run(tmp_path, [{"step": 1, "reward/r/mean": 1.0}])
    assert plots.plot_target(run / "metrics.jsonl", None) == run / "curves.png"
    assert plots.plot_target(run, None) == run / "curves.png"
    assert plots.plot_target(run, str(tmp_path / "new") + "/") == tmp_path / "new" / "curves.png"
    assert plots.plot_target(run, tmp_path / "plain") == tmp_path / "plain.png"

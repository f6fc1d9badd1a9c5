"""trainers/plots.py (mutation round 24): the default keys of a run whose first row lacks some, a row without a
step drawn at step 0, the panel title and the width of a figure of several panels."""

from __future__ import annotations

import pytest
from PIL import Image

from imgalign.trainers import plots
from tests.conftest import metrics_run


def test_the_default_keys_are_those_of_every_row_not_only_the_first(tmp_path, plot_calls) -> None:
    # a reward added on resume, and the in-loop evaluation, appear only in later rows
    _, titles = plot_calls
    run = metrics_run(
        tmp_path,
        [
            {"step": 1, "reward/a/mean": 0.1},
            {"step": 2, "reward/a/mean": 0.2, "reward/b/mean": 0.5, "eval/shapes/overall": 0.3},
        ],
    )
    plots.plot_metrics(run, out=tmp_path / "c.png")
    assert titles == ["reward/a/mean", "reward/b/mean", "eval/shapes/overall"]


def test_a_row_without_a_step_is_drawn_at_step_zero(tmp_path, plot_calls) -> None:
    drawn, _ = plot_calls
    run = metrics_run(tmp_path, [{"reward/a/mean": 0.1}, {"step": 3, "reward/a/mean": 0.4}])
    plots.plot_metrics(run, out=tmp_path / "c.png")
    (((xs, ys, _), _),) = drawn
    assert xs == (0, 3) and ys == (0.1, 0.4)


def test_each_panel_gets_its_own_width(tmp_path) -> None:
    run = metrics_run(
        tmp_path, [{"step": 1, "reward/a/mean": 0.1, "reward/b/mean": 0.2, "reward/c/mean": 0.3}]
    )
    one = plots.plot_metrics(run, ["reward/a/mean"], out=tmp_path / "one.png")
    three = plots.plot_metrics(run, out=tmp_path / "three.png")
    with Image.open(one) as a, Image.open(three) as b:
        assert b.width == pytest.approx(3 * a.width, rel=0.02) and b.height == a.height

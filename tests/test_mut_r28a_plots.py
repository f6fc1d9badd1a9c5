"""trainers/plots.py, mutation round 28a: behaviour the round's surviving mutants showed untested."""

from __future__ import annotations

from imgalign.trainers import plots
from tests.conftest import metrics_run


def test_smooth_one_draws_the_raw_curve_alone_not_a_copy_of_it_as_a_mean(tmp_path, plot_calls) -> None:
    """A 1-step mean is the raw curve itself: with smooth=1 only the per-step line is drawn, however many
    points there are (a second, identical line with a '1-step mean' legend said nothing)."""
    drawn, _ = plot_calls
    run = metrics_run(tmp_path, [{"step": s, "reward/r/mean": float(s % 3)} for s in range(25)])
    plots.plot_metrics(run, out=tmp_path / "c.png", smooth=1)
    assert [kw["label"] for _, kw in drawn] == ["per step"]

"""The curves tool places a metrics row without a step at its row index, as `report` does (stop 66)."""

from __future__ import annotations

import json

import matplotlib.axes
import numpy as np

from imgalign.eval.reports import series
from imgalign.trainers.plots import plot_metrics


def test_rows_without_a_step_are_placed_as_the_report_places_them(tmp_path, monkeypatch):
    rows = [{"reward/a/mean": 0.1}, {"reward/a/mean": 0.4}, {"reward/a/mean": 0.3}]
    f = tmp_path / "metrics.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    drawn = []
    real = matplotlib.axes.Axes.plot

    def plot(self, *args, **kwargs):
        drawn.append((list(args[0]), list(args[1])))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", plot)
    plot_metrics(f, out=tmp_path / "c.png")
    xs, ys = series(rows, "reward/a/mean")
    assert drawn == [(list(xs), list(ys))]  # was [0, 0, 0]: every row at step 0, the values sorted
    assert np.array_equal(xs, [0, 1, 2])

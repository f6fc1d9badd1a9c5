"""The curves tool places a metrics row without a step at its row index among all the file's rows, as `report`
does (stop 66; round 29j's mutant: an index over the rows holding the key only)."""

from __future__ import annotations

import json

import matplotlib.axes
import numpy as np

from imgalign.eval.reports import series
from imgalign.trainers.plots import plot_metrics


def _drawn(rows, tmp_path, monkeypatch, keys=None):
    """The (x, y) of every line plot_metrics draws for `rows` written as a metrics file."""
    f = tmp_path / "metrics.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    drawn = []
    real = matplotlib.axes.Axes.plot

    def plot(self, *args, **kwargs):
        drawn.append((list(args[0]), list(args[1])))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", plot)
    plot_metrics(f, keys=keys, out=tmp_path / "c.png")
    return drawn


def test_rows_without_a_step_are_placed_as_the_report_places_them(tmp_path, monkeypatch):
    rows = [{"reward/a/mean": 0.1}, {"reward/a/mean": 0.4}, {"reward/a/mean": 0.3}]
    xs, ys = series(rows, "reward/a/mean")
    assert _drawn(rows, tmp_path, monkeypatch) == [(list(xs), list(ys))]  # was [0, 0, 0], the values sorted
    assert np.array_equal(xs, [0, 1, 2])


def test_the_row_index_counts_rows_without_the_key(tmp_path, monkeypatch):
    rows = [{"reward/a/mean": 0.1}, {"reward/b/mean": 0.5}, {"reward/a/mean": 0.3, "reward/b/mean": 0.2}]
    xs, ys = series(rows, "reward/a/mean")
    assert list(xs) == [0, 2]
    assert _drawn(rows, tmp_path, monkeypatch, keys=["reward/a/mean"]) == [(list(xs), list(ys))]

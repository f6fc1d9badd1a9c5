"""The curves tool's row index for a row without a step counts every row of the file, as report's curves count it,
not only the rows that hold the plotted key (round 29j mutant: the index over the filtered rows survived)."""

from __future__ import annotations

import json

import matplotlib.axes

from imgalign.eval.reports import series
from imgalign.trainers.plots import plot_metrics


def test_the_row_index_counts_rows_without_the_key(tmp_path, monkeypatch):
    rows = [{"reward/a/mean": 0.1}, {"reward/b/mean": 0.5}, {"reward/a/mean": 0.3, "reward/b/mean": 0.2}]
    f = tmp_path / "metrics.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    drawn = []
    real = matplotlib.axes.Axes.plot

    def plot(self, *args, **kwargs):
        drawn.append((list(args[0]), list(args[1])))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", plot)
    plot_metrics(f, keys=["reward/a/mean"], out=tmp_path / "c.png")
    xs, ys = series(rows, "reward/a/mean")
    assert list(xs) == [0, 2]
    assert drawn == [(list(xs), list(ys))]

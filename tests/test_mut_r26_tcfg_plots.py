"""Mutation round 26 (trainers/plots.py): what the curves tool reads, where no earlier test pinned it down."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgalign.trainers import plots


def test_a_file_other_than_metrics_jsonl_is_not_read_as_its_folders_run(tmp_path: Path) -> None:
    """`path` is a run folder or its metrics.jsonl. Another file of the folder (a kept copy old.jsonl) is refused
    naming what to point at; a mutant that took the parent of any file plotted the folder's metrics.jsonl instead,
    silently not the file the user named. The run's own metrics.jsonl still reads as its folder."""
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/r/mean": 0.5}) + "\n")
    (tmp_path / "old.jsonl").write_text(json.dumps({"step": 1, "reward/r/mean": 0.1}) + "\n")
    # (the message named old.jsonl/metrics.jsonl, a path under a file)
    with pytest.raises(
        FileNotFoundError, match=r"old.jsonl is a file, not a run's metrics.jsonl: point at a run"
    ):
        plots.read_metrics(tmp_path / "old.jsonl")
    assert plots.read_metrics(tmp_path / "metrics.jsonl") == [{"step": 1, "reward/r/mean": 0.5}]
    assert plots.main([str(tmp_path / "old.jsonl"), "--out", str(tmp_path / "c.png")]) == 2
    assert not (tmp_path / "c.png").exists()


def test_a_key_logged_only_as_null_in_some_rows_is_titled_no_finite_value_not_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A panel without points says why: 'no finite value' when some row logged the key (as null/NaN), 'absent'
    when no row has it. A key logged at the evaluation steps only is in some rows, not all: a mutant that asked for
    it in every row titled it 'absent', telling the user the metric was never logged."""
    import matplotlib.axes

    rows = [{"step": 1, "a": None}, {"step": 2}, {"step": 3, "a": float("nan")}]
    monkeypatch.setattr(plots, "read_metrics", lambda path: rows)
    titles = []
    real = matplotlib.axes.Axes.set_title
    monkeypatch.setattr(
        matplotlib.axes.Axes, "set_title", lambda ax, t, *a, **k: (titles.append(t), real(ax, t, *a, **k))[1]
    )
    plots.plot_metrics(tmp_path, keys=["a", "b"], out=tmp_path / "c.png")
    assert titles == ["a (no finite value)", "b (absent)"]


def test_an_empty_key_list_plots_the_default_keys_like_none(tmp_path: Path) -> None:
    """keys=[] (the Python API; the CLI passes None for no keys) said "none given and no reward/*/mean in the file"
    beside a file that logs reward/r/mean; it plots the default keys as keys=None does."""
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/r/mean": 0.5}) + "\n")
    assert plots.plot_metrics(tmp_path, [], tmp_path / "c.png").is_file()
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "metrics.jsonl").write_text(json.dumps({"step": 1, "train/lr": 0.1}) + "\n")
    with pytest.raises(ValueError) as e:
        plots.plot_metrics(tmp_path / "empty", [], tmp_path / "d.png")
    assert str(e.value) == (
        "no metric keys to plot (none given, and the file has no reward/*/mean or eval/shapes/overall): name the "
        "keys to plot"
    )

"""Mutation round 31k: read_metrics("RUN/metrics.jsonl") of a run that has no metrics.jsonl (yet) names
RUN/metrics.jsonl as missing, not RUN/metrics.jsonl/metrics.jsonl (round 30i fixed it for a folder only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.trainers.plots import read_metrics


def test_a_missing_metrics_jsonl_is_named_as_given(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as e:
        read_metrics(tmp_path / "metrics.jsonl")
    assert str(e.value) == (
        f"{tmp_path / 'metrics.jsonl'} does not exist: point at a run folder or its metrics.jsonl"
    )


def test_a_metrics_jsonl_under_a_file_is_named_as_given(tmp_path: Path) -> None:
    (tmp_path / "old.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(FileNotFoundError, match=r"old\.jsonl[/\\]metrics\.jsonl does not exist"):
        read_metrics(tmp_path / "old.jsonl" / "metrics.jsonl")


def test_points_of_a_repeated_step_keep_their_row_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plot_calls: tuple[list, list]
) -> None:
    """A step logged twice (a run resumed from an earlier checkpoint logs its steps again): its points are drawn in
    the order they were logged, 40 rows as 4 (the sort is stable, whatever numpy's default sort does)."""
    from imgalign.trainers import plots

    (tmp_path / "metrics.jsonl").write_text("{}\n")
    rows = [{"step": 19 - i // 2, "reward/r/mean": float(i)} for i in range(40)]
    monkeypatch.setattr(plots, "read_metrics", lambda path: rows)
    plots.plot_metrics(tmp_path, out=tmp_path / "c.png", smooth=1)
    xs, ys = plot_calls[0][0][0][:2]  # the first Axes.plot call's args
    expected = sorted(((r["step"], i) for i, r in enumerate(rows)))
    assert list(xs) == [s for s, _ in expected]
    assert list(ys) == [rows[i]["reward/r/mean"] for _, i in expected]

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

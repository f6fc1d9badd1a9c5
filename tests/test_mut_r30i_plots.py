"""Mutation round 30i: read_metrics refuses a metrics.jsonl that is a folder as IsADirectoryError (what open()
raises for a folder), so an in-process caller can tell it from a run that has no metrics.jsonl."""

from __future__ import annotations

import pytest

from imgalign.trainers.plots import read_metrics


def test_a_metrics_jsonl_folder_is_an_is_a_directory_error(tmp_path) -> None:
    (tmp_path / "metrics.jsonl").mkdir()
    with pytest.raises(IsADirectoryError, match="is a folder, not the file a training run writes"):
        read_metrics(tmp_path)


def test_a_metrics_jsonl_folder_named_itself_is_named(tmp_path) -> None:
    """read_metrics("RUN/metrics.jsonl") where that is a folder named RUN/metrics.jsonl/metrics.jsonl as missing."""
    (tmp_path / "metrics.jsonl").mkdir()
    with pytest.raises(IsADirectoryError) as e:
        read_metrics(tmp_path / "metrics.jsonl")
    assert str(e.value).startswith(
        f"{tmp_path / 'metrics.jsonl'} is a folder, not the file a training run writes"
    )


def test_a_run_without_metrics_jsonl_is_still_a_file_not_found_error(tmp_path) -> None:
    with pytest.raises(FileNotFoundError) as e:
        read_metrics(tmp_path)
    assert not isinstance(e.value, IsADirectoryError) and "does not exist" in str(e.value)

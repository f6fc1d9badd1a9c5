"""Mutation round 25 (stop 62): reading a pretraining checkpoint (:func:`imgalign.pretrain.load_state`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from imgalign.pretrain import load_state


def test_a_file_system_error_reading_a_whole_checkpoint_is_that_error_not_a_damaged_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OSError from the file system (permissions, I/O) while torch reads a whole checkpoint is raised as it is:
    calling the file damaged would tell the user to delete a good checkpoint and start over from step 0."""
    path = tmp_path / "checkpoint.pt"
    torch.save({"config": "{}"}, path)

    def failing_load(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(torch, "load", failing_load)
    with pytest.raises(PermissionError, match="Permission denied"):
        load_state(path, required=("config",))


def test_a_folder_where_the_checkpoint_goes_is_refused_before_training(tmp_path: Path) -> None:
    """A folder at the checkpoint's path read as "no checkpoint": the stage trained from step 0 up to its first
    checkpoint and then failed to write it with "cannot write ... (Is a directory): is the disk full ...?". It is
    refused when the stage starts, naming the path and what to do."""
    path = tmp_path / "checkpoint.pt"
    path.mkdir()
    with pytest.raises(ValueError) as e:
        load_state(path, required=("config",))
    assert str(e.value) == (
        f"{path}: not a file (a folder?), where this stage keeps its training checkpoint; move or delete it, or use "
        "another --out"
    )
    assert load_state(tmp_path / "absent.pt", required=("config",)) is None

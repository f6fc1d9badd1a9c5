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

"""Mutation round 31k: trainers/checkpoint.loading: each error a state dict's loader raises on a file holding
something else is named with the file and what it should hold, once (a file that cannot be read at all is said as
torch_load/load_tensors said it, not wrapped a second time)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.trainers import checkpoint as C


@pytest.mark.parametrize(
    "error",
    [
        KeyError("lr_lambdas"),
        IndexError("list index out of range"),
        TypeError("bad"),
        ValueError("v"),
        AttributeError("no attribute 'keys'"),
    ],
)
def test_a_loader_error_names_the_file_and_what_it_should_hold(tmp_path: Path, error: Exception) -> None:
    path = tmp_path / "scheduler.pt"
    with pytest.raises(C.CheckpointReadError) as e, C.loading(path, "learning-rate scheduler state"):
        raise error
    said = str(e.value)
    assert said.startswith(f"{path} cannot be read (ValueError: it holds no learning-rate scheduler state (")
    assert f"{type(error).__name__}: {error}); another file copied over it?" in said


def test_a_file_that_cannot_be_read_is_not_wrapped_again(tmp_path: Path) -> None:
    path = tmp_path / "optimizer.pt"
    path.write_bytes(b"PK\x03\x04 cut short")
    with pytest.raises(C.CheckpointReadError) as e, C.loading(path, "optimizer state"):
        C.torch_load(path)
    assert "holds no" not in str(e.value) and str(e.value).count("cannot be read") == 1


def test_other_errors_pass_through(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="size mismatch"), C.loading(tmp_path / "x.pt", "optimizer state"):
        raise RuntimeError("size mismatch")

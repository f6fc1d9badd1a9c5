"""A failed write asks about a full disk only when room is what the OS says is missing."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from imgalign.pretrain import writing
from imgalign.trainers.checkpoint import unwritable


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])  # EFBIG: test_badinput_r34g_efbig.py
def test_no_room_asks_about_the_disk(code: int) -> None:
    msg = str(unwritable(Path("/ckpt/state.pt"), OSError(code, "no room")))
    assert msg == (
        "cannot write /ckpt/state.pt (no room): is the disk full, or a file-size limit (ulimit -f) set? The "
        "checkpoint was not published (the run's earlier checkpoints are whole); free space and continue with "
        "--resume auto"
    )


@pytest.mark.parametrize(
    "err",
    [
        PermissionError(errno.EACCES, "Permission denied"),
        OSError(errno.EROFS, "Read-only file system"),
        IsADirectoryError(errno.EISDIR, "Is a directory"),
    ],
)
def test_another_os_reason_asks_whether_the_folder_can_be_written(err: OSError) -> None:
    # "is the disk full?" sent the user to free space, which mends none of these
    msg = str(unwritable(Path("/ckpt/state.pt"), err))
    assert msg == (
        f"cannot write /ckpt/state.pt ({err.strerror}): can the folder be written to (permissions, a read-only "
        "file system, a folder in the way)? The checkpoint was not published (the run's earlier checkpoints are "
        "whole); mend that and continue with --resume auto"
    )


def test_a_library_failure_without_a_reason_still_asks_about_the_disk() -> None:
    msg = str(unwritable(Path("/ckpt/state.pt"), RuntimeError("unexpected pos 64")))
    assert "(RuntimeError: unexpected pos 64): is the disk full" in msg


def test_a_pretraining_write_gives_the_same_advice(tmp_path: Path) -> None:
    with pytest.raises(OSError) as e, writing(tmp_path / "ck.pt"):
        raise PermissionError(errno.EACCES, "Permission denied")
    assert str(e.value) == (
        f"cannot write {tmp_path / 'ck.pt'} (Permission denied): can the folder be written to (permissions, a "
        "read-only file system, a folder in the way)? Nothing half-written was published and any earlier "
        "checkpoint is whole; mend that and run the same command again: it resumes from there"
    )

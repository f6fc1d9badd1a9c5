"""Mutation round 27i: trainers/checkpoint.py's lock_output_dir with and without a lock file."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from imgalign.trainers.checkpoint import lock_output_dir, unlock_output_dir

fcntl = pytest.importorskip("fcntl")


def test_the_warning_without_flock_names_what_it_could_not_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The folder itself where no lock file is used (imgalign eval), OUT/.lock where one is (train)."""

    def no_flock(fd: int, op: int) -> None:
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    with caplog.at_level("WARNING"):
        assert lock_output_dir(tmp_path, "imgalign eval", lock_file=None)
        assert lock_output_dir(tmp_path)
    assert [r.getMessage() for r in caplog.records] == [
        f"cannot lock {what} (Function not implemented): running without the output-folder lock, so a second "
        f"{command} started into this folder is not refused"
        for what, command in ((tmp_path, "imgalign eval"), (tmp_path / ".lock", "imgalign train"))
    ]
    assert [p.name for p in tmp_path.iterdir()] == [".lock"]


def test_the_lock_file_is_made_with_mode_644_less_the_umask(tmp_path: Path) -> None:
    """OUT/.lock has the mode of a file created with 0o644 in the same folder (rw-r--r-- under umask 022)."""
    ref = tmp_path / "ref"
    os.close(os.open(ref, os.O_WRONLY | os.O_CREAT, 0o644))
    try:
        assert lock_output_dir(tmp_path)
    finally:
        unlock_output_dir(tmp_path)
    assert (tmp_path / ".lock").stat().st_mode & 0o777 == ref.stat().st_mode & 0o777

"""Mutation round 25 (stop 62): imgalign.hub's root-logger filter is removed after the load, and the weights-file
probe of a path that is no folder."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from imgalign.hub import has_weight_files, quiet_open_clip_errors


def test_open_clips_error_lines_are_dropped_only_while_the_model_loads() -> None:
    """Inside the block an ERROR record from open_clip's files is dropped; after it (also after an error in it)
    the root logger has its filters as before and the same record passes (a filter left behind hid every later
    open_clip error of the process)."""
    root = logging.getLogger()
    before = list(root.filters)
    record = logging.LogRecord(
        "root", logging.ERROR, f"{os.sep}x{os.sep}open_clip{os.sep}factory.py", 1, "Failed", None, None
    )
    with quiet_open_clip_errors():
        assert not root.filter(record)
    try:
        with quiet_open_clip_errors():
            raise RuntimeError("load failed")
    except RuntimeError:
        pass
    assert root.filters == before
    assert root.filter(record)


def test_a_file_or_a_missing_path_holds_no_weight_files(tmp_path: Path) -> None:
    """has_weight_files is False for a path that is no folder (a weights file itself, or nothing), not a
    NotADirectoryError or FileNotFoundError traceback."""
    f = tmp_path / "model.safetensors"
    f.write_bytes(b"x")
    assert has_weight_files(tmp_path)
    assert not has_weight_files(f)
    assert not has_weight_files(tmp_path / "missing")


def test_a_tilde_of_a_user_this_system_does_not_know_is_told_without_a_folder() -> None:
    """~USER of an unknown user has no home folder to name (pathlib raises RuntimeError): the hint says to give
    the full path, not a RuntimeError traceback out of the error message being built."""
    from imgalign.hub import tilde_hint

    assert tilde_hint("~no_such_user_r25/model") == " (a quoted ~ is not expanded: give the full path)"

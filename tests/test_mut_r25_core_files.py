"""Mutation round 25 (stop 62): imgalign.files where /proc/self/status gives no umask."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from imgalign import files


@pytest.mark.parametrize("status", [OSError("no /proc"), "Name:\tpython\nUmask:\tzz\n", "Name:\tpython\n"])
def test_without_a_readable_umask_line_the_umask_is_read_portably_and_left_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status: object
) -> None:
    """No /proc (macOS), a Umask line that is not octal, or none at all: the umask is read by setting it and
    setting it back, so a published file gets 0o666 less it and the process keeps its umask (left at 0, every file
    the process made afterwards was world-writable)."""
    real = Path.read_text

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        if str(self) == "/proc/self/status":
            if isinstance(status, Exception):
                raise status
            return str(status)
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", read_text)
    f = tmp_path / "out.bin"
    f.write_bytes(b"x")
    os.chmod(f, 0o600)
    old = os.umask(0o027)
    try:
        files.open_mode(f)
        now = os.umask(0o027)
    finally:
        os.umask(old)
    assert now == 0o027
    assert stat.S_IMODE(f.stat().st_mode) == 0o640

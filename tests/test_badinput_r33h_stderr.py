"""A stderr that refuses writes (``2> /dev/full``, a log on a full disk, ``2>&1 | head`` once head quit) or that is
closed (``2>&-``): the first progress bar raised, so `score`, `eval` and `world render` ended before doing any work,
with exit status 1 and no line anywhere. Lost diagnostics no longer stop the work."""

from __future__ import annotations

import errno
import io
import sys
from pathlib import Path

import pytest

from imgalign import cli


class _Refusing(io.RawIOBase):
    def __init__(self) -> None:
        self.refuse = True

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        if self.refuse:
            raise OSError(errno.ENOSPC, "No space left on device")
        return len(data)


def _render_argv(tmp_path: Path) -> list[str]:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        '{"tag": "single_object", "include": [{"class": "circle", "count": 1}], "prompt": "a circle"}\n'
    )
    return ["imgalign", "world", "render", "--prompts", str(prompts), "--images-per-prompt", "2", "--out"]


@pytest.mark.parametrize("closed", [False, True], ids=["full", "closed"])
def test_a_stderr_that_takes_nothing_does_not_stop_the_work(tmp_path, monkeypatch, closed) -> None:
    raw = _Refusing()
    stderr = (
        None if closed else io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8", line_buffering=True)
    )
    monkeypatch.setattr(sys, "stderr", stderr)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.setattr(sys, "argv", [*_render_argv(tmp_path), str(tmp_path / "r")])  # progress bars on
    try:
        assert cli.console_main() == 0
        assert sys.stderr is stderr  # the program's own stream is its own again
    finally:
        raw.refuse = False  # (so that the stream's flush when it is collected succeeds)
    assert sorted(p.name for p in (tmp_path / "r" / "00000" / "samples").iterdir()) == [
        "0000.png",
        "0001.png",
    ]

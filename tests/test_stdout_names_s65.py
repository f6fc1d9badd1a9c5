"""The `imgalign` program prints a path whose name is not UTF-8 (bytes the file system holds, read by Python as
lone surrogates) on a strict UTF-8 stdout (LANG=en_US.UTF-8, PYTHONIOENCODING=utf-8): the work was done, and then
the closing "wrote PATH" line failed with "'utf-8' codec can't encode character '\\udce9'" and exit status 2."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest

from imgalign import cli


def test_a_path_that_is_not_utf8_is_printed_escaped_and_the_command_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        '{"tag": "single_object", "include": [{"class": "circle", "count": 1}], "prompt": "a circle"}\n'
    )
    out = os.fsdecode(os.fsencode(str(tmp_path)) + b"/x\xe9")
    raw = io.BytesIO()
    stdout = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True)
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "imgalign",
            "world",
            "render",
            "--prompts",
            str(prompts),
            "--images-per-prompt",
            "1",
            "--out",
            out,
            "--no-progress",
        ],
    )
    assert cli.console_main() == 0
    assert Path(out, "00000", "samples", "0000.png").is_file()
    assert raw.getvalue().decode().strip().endswith("/x\\udce9")

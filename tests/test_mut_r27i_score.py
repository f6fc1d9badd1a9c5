"""Mutation round 27i: imgalign/commands/score.py's write_rows writes its CSV as UTF-8."""

from __future__ import annotations

import json
from pathlib import Path

from imgalign.commands.score import write_rows


def test_the_csv_and_jsonl_of_non_ascii_names_and_prompts_are_utf8(tmp_path: Path) -> None:
    """A UTF-8 file name or prompt beyond Latin-1 is written as UTF-8 (the CSV opened in a spreadsheet as UTF-8);
    the JSONL escapes it."""
    rows = [{"file": "日本/café.png", "prompt": "a cat — small", "scores": {"clip": 0.25}, "error": None}]
    write_rows(tmp_path / "s.csv", rows, ["clip"])
    assert (tmp_path / "s.csv").read_bytes() == (
        "file,prompt,clip,error\r\n日本/café.png,a cat — small,0.25,\r\n".encode()
    )
    write_rows(tmp_path / "s.jsonl", rows, ["clip"])
    assert [json.loads((tmp_path / "s.jsonl").read_bytes())] == rows

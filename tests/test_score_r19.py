"""Mutation round 19: `imgalign score` (imgalign/commands/score.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgalign import shapes as W
from imgalign.cli import main
from imgalign.eval.suite import write_prompt_folder


@pytest.mark.parametrize("lead", ["", "\n  \n"])
def test_an_out_of_file_prompt_rows_is_not_replaced(tmp_path: Path, capsys, lead: str) -> None:
    """An existing --out whose first line is a --prompts row ({"file", "prompt"}, no "scores"), such as another
    prompt list than the one passed, is not an `imgalign score` output: it is refused, unchanged; also after blank
    lines, as the first line that is not blank decides (round 20, T04)."""
    spec = W.single_object("circle")
    gen = tmp_path / "gen"
    write_prompt_folder(gen, 0, spec.to_metadata(), [W.render(spec, 0)[0]])
    rows = tmp_path / "rows.jsonl"
    before = lead + json.dumps({"file": "gen/00000/samples/0000.png", "prompt": spec.prompt()}) + "\n"
    rows.write_text(before)
    argv = ["score", str(gen), "--reward", "geneval:mode=strict", "--no-progress", "--out", str(rows)]
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"--out {str(rows)!r} exists and is not an `imgalign score` output" in err
    assert rows.read_text() == before

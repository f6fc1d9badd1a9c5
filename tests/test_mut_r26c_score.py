"""Mutation round 26c: which `imgalign score --baseline` rows are called an `imgalign eval` results.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from imgalign.cli import main


def _baseline_error(text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """stderr of `imgalign score IMG --baseline B` with B holding `text`; it must refuse and write nothing."""
    base = tmp_path / "b.jsonl"
    base.write_text(text)
    img = tmp_path / "img.png"
    Image.new("RGB", (8, 8)).save(img)
    out = tmp_path / "s.jsonl"
    argv = ["score", str(img), "--reward", "artifact", "--out", str(out), "--baseline", str(base)]
    assert main([*argv, "--no-progress"]) == 2
    assert not out.exists()
    return capsys.readouterr().err


def test_a_first_line_that_is_no_json_is_named_by_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A first line that json cannot read leaves no row to look at: without `row = None` before the read, the
    evaluation check read an unbound name and failed with UnboundLocalError's traceback."""
    err = _baseline_error("not json\n", tmp_path, capsys)
    assert "line 1 is not an `imgalign score` JSONL row" in err
    assert "imgalign eval" not in err


def test_a_row_with_only_a_reason_is_no_evaluation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An evaluation's row has both `correct` and `reason`; a row with `reason` alone was called an `imgalign
    eval` results.jsonl, where it is just no score row."""
    err = _baseline_error(json.dumps({"file": "a.png", "reason": "x"}) + "\n", tmp_path, capsys)
    assert "line 1 is not an `imgalign score` JSONL row" in err
    assert "imgalign eval" not in err


def test_a_score_row_that_also_has_correct_and_reason_is_no_evaluation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row with `scores` is a score row, whatever else it holds: one whose scores are no object (and that
    carries correct/reason) was called an evaluation's results, where its scores are what is wrong."""
    row = {"file": "a.png", "scores": [1.0], "correct": True, "reason": "x"}
    err = _baseline_error(json.dumps(row) + "\n", tmp_path, capsys)
    assert "line 1 is not an `imgalign score` JSONL row (scores is not an object)" in err
    assert "imgalign eval" not in err

"""Bad-input round 29 (second pass): a prompt folder's metadata.jsonl holding several rows (another prompt's row
appended, or a prompt file copied in) was judged by its first row without a word, by `imgalign eval --images` and
by `imgalign score` (the official GenEval evaluator refuses it); the first row still counts
(tests/test_cli_eval.py pins that), with a warning naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgalign.cli import main
from imgalign.eval.suite import read_folder_index
from tests.conftest import SQUARE_META as SQUARE
from tests.conftest import square_layout

CIRCLE = {
    "tag": "single_object",
    "include": [{"class": "circle", "count": 1}],
    "prompt": "a photo of a circle",
}


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    return square_layout(tmp_path / "images")


def test_a_folder_of_one_row_and_trailing_blank_lines_reads_without_a_warning(
    layout: Path, caplog: pytest.LogCaptureFixture
) -> None:
    meta = layout / "00000" / "metadata.jsonl"
    meta.write_text(meta.read_text() + "\n\n")
    assert [f.metadata for f in read_folder_index(layout)] == [SQUARE]
    assert "metadata rows" not in caplog.text


def test_eval_warns_of_a_metadata_file_of_two_rows(layout: Path, caplog: pytest.LogCaptureFixture) -> None:
    meta = layout / "00000" / "metadata.jsonl"
    meta.write_text(meta.read_text() + json.dumps(CIRCLE) + "\n")
    assert [f.metadata for f in read_folder_index(layout)] == [SQUARE]
    assert "00000/metadata.jsonl holds 2 metadata rows; only its first is read" in caplog.text
    assert "keep the row of this folder's prompt" in caplog.text


def test_a_pretty_printed_object_is_still_named_as_not_json(layout: Path) -> None:
    (layout / "00000" / "metadata.jsonl").write_text(json.dumps(SQUARE, indent=2))
    with pytest.raises(ValueError, match="line 1 is not valid JSON"):
        read_folder_index(layout)


def test_score_warns_of_a_metadata_file_of_two_rows(
    layout: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    meta = layout / "00000" / "metadata.jsonl"
    meta.write_text(meta.read_text() + json.dumps(CIRCLE) + "\n")
    out = tmp_path / "scores.jsonl"
    assert main(["score", str(layout), "--reward", "geneval", "--out", str(out), "--no-progress"]) == 0
    assert "holds 2 metadata rows; only its first is read" in caplog.text
    assert json.loads(out.read_text())["prompt"] == SQUARE["prompt"]

"""Bad-input round 31: `imgalign score` and `imgalign eval` of images whose file or folder names are not UTF-8."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest
from PIL import Image

from imgalign.cli import main
from imgalign.eval.suite import write_prompt_folder

NAME = os.fsdecode(b"caf\xe9.png")  # a Latin-1 name from an old camera or a Windows share: not UTF-8


@pytest.fixture
def images(tmp_path: Path) -> Path:
    folder = tmp_path / "images"
    folder.mkdir()
    try:
        Image.new("RGB", (8, 8), (200, 30, 30)).save(folder / NAME)
    except (OSError, UnicodeEncodeError):  # a file system that takes UTF-8 names only (macOS)
        pytest.skip("this file system refuses a name that is not UTF-8")
    return folder


def test_a_csv_out_names_a_file_whose_name_is_not_utf8_by_the_bytes_of_its_name(
    images: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CSV failed with "'utf-8' codec can't encode character '\\udce9'", naming no file, after every image was
    scored; it names the file by the bytes the file system has, as the JSONL names it by its escape."""
    out = tmp_path / "s.csv"
    assert main(["score", str(images), "--reward", "artifact", "--out", str(out), "--no-progress"]) == 0
    assert "codec" not in capsys.readouterr().err
    with out.open(newline="", encoding="utf-8", errors="surrogateescape") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["file", "prompt", "artifact", "error"] and len(rows) == 2
    assert Path(rows[1][0]) == images / NAME and Path(rows[1][0]).is_file() and rows[1][3] == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["images", "s.csv"]  # no partial file left
    jsonl = tmp_path / "s.jsonl"
    assert main(["score", str(images), "--reward", "artifact", "--out", str(jsonl), "--no-progress"]) == 0
    (row,) = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert Path(row["file"]) == images / NAME and row["scores"]["artifact"] == float(rows[1][2])


def test_eval_of_a_folder_whose_name_is_not_utf8_writes_its_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`imgalign eval --images` of such a folder judged every image, then failed on report.md (the model is named
    by the folder) with "'utf-8' codec can't encode character '\\udce9'"; report.md names it by its bytes."""
    images = tmp_path / os.fsdecode(b"gen\xe9")
    try:
        (images / "00000" / "samples").mkdir(parents=True)
    except (OSError, UnicodeEncodeError):
        pytest.skip("this file system refuses a name that is not UTF-8")
    meta = {
        "tag": "single_object",
        "include": [{"class": "square", "count": 1}],
        "prompt": "a photo of a square",
    }
    write_prompt_folder(images, 0, meta, [Image.new("RGB", (64, 64), (255, 255, 255))])
    out = tmp_path / "ev"
    assert main(["eval", "--images", str(images), "--out", str(out), "--no-progress"]) == 0
    assert "codec" not in capsys.readouterr().err
    assert b"gen\xe9" in (out / "report.md").read_bytes()
    assert json.loads((out / "summary.json").read_text())["n_images"] == 1

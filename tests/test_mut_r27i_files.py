"""Mutation round 27i: imgalign/files.py's temporary names of an output file whose name is not UTF-8."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from imgalign.files import NAME_MAX, atomic_write_text, replacing, temporary_name


def _latin1(tmp_path: Path, raw: bytes) -> Path:
    path = tmp_path / os.fsdecode(raw)
    try:
        path.write_bytes(b"")
        path.unlink()
    except (OSError, UnicodeEncodeError):  # a file system that takes UTF-8 names only (macOS)
        pytest.skip("this file system refuses a name that is not UTF-8")
    return path


def test_a_file_whose_name_is_not_utf8_is_written_under_that_name(tmp_path: Path) -> None:
    """temporary_name measured the name with str.encode(), which failed on os.fsdecode's surrogates: "'utf-8'
    codec can't encode character '\\udce9'" and nothing written."""
    path = _latin1(tmp_path, b"caf\xe9.json")
    atomic_write_text(path, "x\n")
    assert os.listdir(os.fsencode(tmp_path)) == [b"caf\xe9.json"] and path.read_text() == "x\n"


def test_a_long_name_that_is_not_utf8_is_measured_in_its_bytes_and_hashed(tmp_path: Path) -> None:
    """250 Latin-1 bytes: 1 byte each on disk (2 each as UTF-8), so the temporary name is over NAME_MAX only with
    the tag; the hashed one is taken and the file written."""
    raw = b"\xe9" * 246 + b".csv"
    path = _latin1(tmp_path, raw)
    assert temporary_name(path).name == os.fsdecode(b"." + raw + b".tmp")  # 255 bytes: kept as it is
    with replacing(path) as tmp:
        assert len(os.fsencode(tmp.name)) <= NAME_MAX and tmp.name.endswith(".tmp")
        tmp.write_text("1")
    assert os.listdir(os.fsencode(tmp_path)) == [raw] and path.read_text() == "1"


def test_score_rows_to_an_out_whose_name_is_not_utf8_are_written(tmp_path: Path) -> None:
    """`imgalign score --out` of such a name scored every image, then failed with the codec error, writing nothing
    (write_rows, the part of `imgalign score` that writes --out; the "wrote ..." line it prints after is the
    terminal's to show)."""
    from imgalign.commands.score import write_rows

    out = _latin1(tmp_path, b"s\xe9.csv")
    write_rows(
        out, [{"file": "a.png", "prompt": "", "scores": {"artifact": 1.5}, "error": None}], ["artifact"]
    )
    assert os.listdir(os.fsencode(tmp_path)) == [b"s\xe9.csv"]
    assert out.read_text().splitlines() == ["file,prompt,artifact,error", "a.png,,1.5,"]

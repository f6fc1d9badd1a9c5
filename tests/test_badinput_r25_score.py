"""Bad-input round 25: `imgalign score` and `imgalign grid` given an --out that names no file."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from imgalign.cli import main


@pytest.fixture
def images(tmp_path: Path) -> Path:
    folder = tmp_path / "images"
    folder.mkdir()
    Image.new("RGB", (8, 8)).save(folder / "a.png")
    return folder


@pytest.mark.parametrize("out", [".jsonl", "sub/.CSV", ".json"])
def test_score_names_an_out_that_is_only_its_extension(
    out: str,
    images: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--out .jsonl` said "--out '.jsonl' must end in .jsonl or .csv": it does, but Path('.jsonl') is a hidden file
    without a suffix. The error says the name is missing."""
    monkeypatch.chdir(tmp_path)
    assert main(["score", str(images), "--reward", "artifact", "--out", out]) == 2
    err = capsys.readouterr().err
    name = Path(out).name
    assert f"--out {out!r} has no name before {name}: give one, e.g. scores{name}" in err
    assert "must end in" not in err and sorted(p.name for p in tmp_path.iterdir()) == ["images"]


@pytest.mark.parametrize("out", ["", " "])
def test_score_and_grid_name_an_empty_out(
    out: str,
    images: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--out "$OUT"` with OUT unset said "--out '' must end in .jsonl or .csv" (score) and "the grid is written
    as PNG; use a .png name" (grid); both say it is empty."""
    monkeypatch.chdir(tmp_path)
    assert main(["score", str(images), "--reward", "artifact", "--out", out]) == 2
    assert "--out is empty (an unset shell variable?): give the output file" in capsys.readouterr().err
    assert main(["grid", "--model", "a=shapes", "--prompt", "x", "--out", out]) == 2
    assert "--out is empty (an unset shell variable?): give the output PNG" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["images"]


def test_grid_names_an_out_that_is_only_its_extension(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--out .png` said "the grid is written as PNG; use a .png name"."""
    monkeypatch.chdir(tmp_path)
    assert main(["grid", "--model", "a=shapes", "--prompt", "x", "--out", ".PNG"]) == 2
    assert "--out '.PNG' has no name before .PNG: give one, e.g. grid.PNG" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []

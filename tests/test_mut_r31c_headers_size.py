"""rewards/io.folder_image_size reads the folder's sizes from headers only: an image over twice PIL's pixel limit is
left out there (it is named when read; round 31c survivor I11: DecompressionBombError no longer suppressed), and one
over the limit alone does not bring PIL's own warning, which names no file (read_image's open_image names it)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from PIL import Image

from imgalign.rewards.io import folder_image_size


def _folder(tmp_path: Path) -> Path:
    d = tmp_path / "d"
    d.mkdir()
    Image.new("RGB", (10, 10)).save(d / "a.png")
    Image.new("RGB", (10, 10)).save(d / "b.png")
    Image.new("RGB", (80, 50)).save(d / "c.png")  # 4000 pixels: over a limit of 3000, under twice it
    Image.new("RGB", (100, 70)).save(d / "d.png")  # 7000 pixels: over twice it (PIL refuses it)
    return d


def test_an_image_pil_refuses_is_left_out_of_the_folders_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = _folder(tmp_path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 3000)
    assert folder_image_size(d) == (10, 10)
    (d / "a.png").unlink()
    (d / "b.png").unlink()
    assert folder_image_size(d) == (80, 50)


def test_reading_the_sizes_shows_no_unnamed_decompression_bomb_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = _folder(tmp_path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 3000)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        assert folder_image_size(d) == (10, 10)
    assert not [w for w in shown if issubclass(w.category, Image.DecompressionBombWarning)]

"""rewards/io.open_image's warning of an image over PIL's decompression-bomb warning limit gives its size as
width x height, and PIL's own warning, which names no file, is not shown beside it (round 30j survivors I3:
width and height swapped, I4: PIL's warning let through with a "default" filter)."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest
from PIL import Image

from imgalign.rewards.io import open_image


def test_a_large_image_is_named_with_its_width_by_height_and_pils_warning_kept_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "wide.png"
    Image.new("RGB", (80, 50)).save(path)  # 4000 pixels: over a limit of 3000, under twice it (refused)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 3000)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with caplog.at_level(logging.WARNING):
            with open_image(path, "user/wide.png") as im:
                assert im.size == (80, 50)
    assert "user/wide.png is 80x50 pixels, over PIL's limit of 3000" in caplog.text
    assert not [w for w in shown if issubclass(w.category, Image.DecompressionBombWarning)]

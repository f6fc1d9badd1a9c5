"""rewards/io.open_image's warning of an image over PIL's decompression-bomb warning limit gives its size as
width x height, and PIL's own warning, which names no file, is not shown beside it (round 30j survivors I3:
width and height swapped, I4: PIL's warning let through with a "default" filter); PIL's other warnings while it opens
an image are not made errors (I7: simplefilter("error") for every warning)."""

from __future__ import annotations

import logging
import struct
import warnings
import zlib
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


def test_another_pil_warning_while_opening_is_no_error(tmp_path: Path) -> None:
    """A PNG with an APNG frame count of 0: PIL warns "Invalid APNG, will use default PNG image if possible" and reads
    the PNG; only the decompression-bomb warning is caught as an error."""
    plain = tmp_path / "plain.png"
    Image.new("RGB", (8, 8), "red").save(plain)
    data = plain.read_bytes()
    body = struct.pack(">II", 0, 0)  # acTL: 0 frames, 0 plays
    actl = struct.pack(">I", 8) + b"acTL" + body + struct.pack(">I", zlib.crc32(b"acTL" + body))
    path = tmp_path / "odd.png"
    path.write_bytes(data[:33] + actl + data[33:])  # after the signature (8) and the IHDR chunk (25)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with open_image(path) as im:
            im.load()
            assert im.getpixel((0, 0)) == (255, 0, 0)
    assert "Invalid APNG, will use default PNG image if possible" in [str(w.message) for w in shown]

"""Mutation round 31k: read_image's aspect-ratio refusal: the limit score's help and docstring state (100:1), and no
refusal where no limit is given (the folder loaders resize every image to one size first)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from imgalign.rewards.io import MAX_ASPECT, ImageReadError, read_image


def test_the_limit_is_the_documented_100_to_1(tmp_path: Path) -> None:
    Image.new("RGB", (200, 2)).save(tmp_path / "at.png")
    Image.new("RGB", (2, 202)).save(tmp_path / "over.png")
    assert MAX_ASPECT == 100
    assert read_image(tmp_path / "at.png", MAX_ASPECT).size == (200, 2)
    with pytest.raises(ImageReadError, match=r"over\.png: 2x202 pixels, over 100:1 between its sides"):
        read_image(tmp_path / "over.png", MAX_ASPECT)


def test_without_a_limit_an_elongated_image_is_read(tmp_path: Path) -> None:
    Image.new("RGB", (1000, 1)).save(tmp_path / "strip.png")
    im = read_image(tmp_path / "strip.png")
    assert im.size == (1000, 1) and im.mode == "RGB"

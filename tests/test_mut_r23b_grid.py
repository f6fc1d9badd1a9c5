"""imgalign grid: edges that round 23's second mutation pass left open."""

from __future__ import annotations

import pytest
from PIL import Image

from imgalign.commands.grid import check_grid_pixels


def test_a_grid_of_any_size_is_taken_where_pillow_is_told_to_open_any_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`Image.MAX_IMAGE_PIXELS = None` (a user who opens images of any size) sets no limit: a grid of 4000 prompts
    is not refused as larger than Pillow opens (G28); with the default limit it is."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)
    check_grid_pixels(4000, 8, 512)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 89_478_485)
    with pytest.raises(ValueError, match="more than Pillow opens"):
        check_grid_pixels(4000, 8, 512)

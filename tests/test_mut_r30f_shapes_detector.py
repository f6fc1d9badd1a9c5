"""eval/shapes_detector.ShapesDetector: min_area (12 pixels at the world's 64 x 64) is scaled by the image's pixel
count, so a larger image needs a larger object and a smaller one a smaller object (round 30f: an unscaled min_area
survived, as the tests' images all had 64² pixels)."""

from __future__ import annotations

import numpy as np
import pytest

from imgalign import shapes as W
from imgalign.eval.shapes_detector import ShapesDetector


def _red_blocks(size: int, blocks: list[tuple[int, int]]) -> np.ndarray:
    """A `size` x `size` background with one red block of each (height, width), apart along the diagonal."""
    img = np.tile(np.array(W.BACKGROUND, float), (size, size, 1))
    at = 2
    for h, w in blocks:
        img[at : at + h, at : at + w] = np.array(W.COLORS["red"], float)
        at += max(h, w) + 4
    return np.round(img).astype(np.uint8)


@pytest.mark.parametrize(
    ("size", "blocks", "kept"),
    [
        (128, [(5, 6), (7, 7)], [49]),  # needs 12 * 4 = 48 pixels: 30 is dropped, 49 kept
        (32, [(2, 2), (1, 2)], [4]),  # needs 12 / 4 = 3 pixels: 4 is kept, 2 dropped
    ],
)
def test_the_smallest_object_kept_scales_with_a_square_images_size(size, blocks, kept):
    assert size * size != W.IMAGE_SIZE**2
    found = [d for ds in ShapesDetector()(_red_blocks(size, blocks)).values() for d in ds]
    areas = sorted(round((d.box[2] - d.box[0]) * (d.box[3] - d.box[1])) for d in found)
    assert areas == kept

"""eval/shapes_detector.py (mutation round 28f): the documented defaults and boundaries of the detector: a pixel is
foreground when its alpha is above 0.5 (not at it), components are 8-connected, the smallest component kept at the
world's image size has 12 pixels, an over-saturated palette colour counts as alpha 1, and a box is (x0, y0, x1, y1)."""

from __future__ import annotations

import numpy as np
import pytest

from imgalign import shapes as W
from imgalign.eval.shapes_detector import ShapesDetector, unmix

_BG = np.array(W.BACKGROUND, float)
_RED = np.array(W.COLORS["red"], float)


def _image(alpha: np.ndarray, colour: np.ndarray = _RED) -> np.ndarray:
    """A world-size RGB image: `alpha` (H, W) blends the background towards `colour` (may reach past it)."""
    return np.clip(np.round(_BG + alpha[..., None] * (colour - _BG)), 0, 255).astype(np.uint8)


def _all(det: dict) -> list:
    return [d for ds in det.values() for d in ds]


def test_a_pixel_at_exactly_half_alpha_is_background_and_just_above_it_is_foreground() -> None:
    """Foreground is alpha > 0.5 (default `fg_alpha`). Red minus the background is (196, 6, 6), so a pixel at
    background + half of it unmixes to alpha exactly 0.5: a 10 x 10 block of it is no object; at 0.55 it is one.
    `>=` detected the half-alpha block, and a default of 0.4 detected a 0.45 block."""
    n = W.IMAGE_SIZE
    half = np.zeros((n, n))
    half[20:30, 20:30] = 0.5
    k, alpha = unmix(_image(half))
    assert alpha[25, 25] == 0.5 and list(W.COLORS)[k[25, 25]] == "red"
    assert _all(ShapesDetector()(_image(half))) == []
    below = np.where(half > 0, 0.45, 0.0)
    assert _all(ShapesDetector()(_image(below))) == []
    above = np.where(half > 0, 0.55, 0.0)
    (det,) = _all(ShapesDetector()(_image(above)))
    assert det.box == (20.0, 20.0, 30.0, 30.0)


def test_the_smallest_component_kept_at_the_world_size_has_twelve_pixels() -> None:
    """Default `min_area` 12 at IMAGE_SIZE², kept when the component has at least that many pixels: a 3 x 4 block
    (12 pixels) is an object, the same block less a corner (11) is noise. A default of 13 or `<=` dropped the 12."""
    n = W.IMAGE_SIZE
    a = np.zeros((n, n))
    a[30:33, 40:44] = 1.0
    (det,) = _all(ShapesDetector()(_image(a)))
    assert det.box == (40.0, 30.0, 44.0, 33.0) and det.color == "red"
    a[30, 40] = 0.0
    assert _all(ShapesDetector()(_image(a))) == []


def test_two_blocks_touching_only_at_a_corner_are_one_8_connected_component() -> None:
    """Components are 8-connected: two 5 x 5 red blocks that share only a corner are one object whose box spans
    both. With 4-connectivity they were two objects."""
    n = W.IMAGE_SIZE
    a = np.zeros((n, n))
    a[10:15, 10:15] = 1.0
    a[15:20, 15:20] = 1.0
    (det,) = _all(ShapesDetector()(_image(a)))
    assert det.box == (10.0, 10.0, 20.0, 20.0)


def test_a_box_is_x0_y0_x1_y1_of_the_component() -> None:
    """A 20-wide, 8-tall red bar at rows 5..13 and columns 30..50 has box (30, 5, 50, 13): x first.
    Swapping the slices gave (5, 30, 13, 50), which moves every object of a position prompt."""
    n = W.IMAGE_SIZE
    a = np.zeros((n, n))
    a[5:13, 30:50] = 1.0
    (det,) = _all(ShapesDetector()(_image(a)))
    assert det.box == (30.0, 5.0, 50.0, 13.0)


def test_a_colour_more_saturated_than_the_palette_counts_as_full_alpha() -> None:
    """alpha is clipped to [0, 1]: a square drawn 1.1 x past red (away from the background) is a clean square of
    confidence 1, the same as the palette red. Clipping at 1.5 let the soft alpha exceed the template and the IoU
    (and the score) fell."""
    n = W.IMAGE_SIZE
    a = np.zeros((n, n))
    a[20:40, 20:40] = W.shape_mask("square", 20, 20)
    (exact,) = ShapesDetector()(_image(a))["square"]
    (vivid,) = ShapesDetector()(_image(a * 1.1))["square"]
    assert exact.score == pytest.approx(1.0)
    assert vivid.score == pytest.approx(1.0)
    assert vivid.class_scores == pytest.approx(exact.class_scores)

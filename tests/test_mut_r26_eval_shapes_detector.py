"""eval/shapes_detector.py (mutation round 26): a shape's soft IoU leaves out the pixels of another component of
the same colour inside its box, and the first class of `SHAPES` wins a tie of IoUs."""

from __future__ import annotations

import numpy as np
import pytest

from imgalign import shapes as W
from imgalign.eval.shapes_detector import ShapesDetector


def _red_circle(speck: bool) -> np.ndarray:
    """A 24 x 24 red circle at (10, 10) on the background; `speck`: a separate 2 x 2 red speck in its box's
    empty top-left corner (not 8-connected to the circle, and under `min_area`, so no detection of its own)."""
    alpha = np.zeros((64, 64))
    alpha[10:34, 10:34] = W.shape_mask("circle", 24, 24)
    if speck:
        alpha[11:13, 11:13] = 1.0
    bg, red = np.array(W.BACKGROUND, float), np.array(W.COLORS["red"], float)
    return np.round(bg + alpha[..., None] * (red - bg)).astype(np.uint8)


def test_a_same_colour_speck_in_a_shapes_box_does_not_change_its_class_scores() -> None:
    """The soft alpha of a component keeps its own pixels and the unlabelled anti-aliased rim of its colour; the
    pixels of another labelled component of that colour are zeroed. Keeping every pixel of the colour in the box
    (`labels >= 0` for `labels == 0`) counted the speck as part of the circle: its square score rose from 0.710
    to 0.727 and its cross score fell, so a neighbour's pixels bent a shape's dense credit."""
    alone = ShapesDetector()(_red_circle(speck=False))
    with_speck = ShapesDetector()(_red_circle(speck=True))
    assert list(with_speck) == ["circle"] and len(with_speck["circle"]) == 1
    (a,), (b,) = alone["circle"], with_speck["circle"]
    assert b.box == a.box == (10.0, 10.0, 34.0, 34.0)
    assert b.class_scores == a.class_scores
    assert a.class_scores["square"] == pytest.approx(0.71, abs=0.005)


def test_the_first_shape_class_wins_a_tie_of_ious(monkeypatch: pytest.MonkeyPatch) -> None:
    """`_ious` says the first class of `SHAPES` wins ties: with square and cross tied at the top, the detection is
    a square (`SHAPES` order: circle, square, triangle, cross). Taking the maximum over the classes in reverse
    labelled it a cross."""
    assert W.SHAPES == ("circle", "square", "triangle", "cross")
    ious = {"circle": 0.6, "square": 0.9, "triangle": 0.7, "cross": 0.9}
    monkeypatch.setattr(ShapesDetector, "_ious", staticmethod(lambda soft, w, h: dict(ious)))
    det = ShapesDetector()(_red_circle(speck=False))
    assert list(det) == ["square"]
    assert det["square"][0].score == pytest.approx(1.0)
    assert det["square"][0].class_scores == pytest.approx(
        {"circle": 0.25, "square": 1.0, "triangle": 0.5, "cross": 1.0}
    )


@pytest.mark.parametrize("height, width", [(32, 128), (128, 32)])
def test_the_smallest_object_kept_scales_with_the_images_pixel_count_not_its_width(
    height: int, width: int
) -> None:
    """min_area (12 pixels at 64 x 64) is scaled by H·W / 64²: a wide 32 x 128 image (as many pixels as 64 x 64)
    keeps a 5 x 6 object (30 pixels). Scaled by the width alone it needed 48 pixels and the object was dropped;
    a tall 128 x 32 one needed 3. A 2 x 3 speck (6 pixels) is below the threshold either way."""
    bg, red = np.array(W.BACKGROUND, float), np.array(W.COLORS["red"], float)
    img = np.tile(bg, (height, width, 1))
    img[4:9, 4:10] = red
    img[20:22, 20:23] = red
    det = ShapesDetector()(np.round(img).astype(np.uint8))
    found = [d for ds in det.values() for d in ds]
    assert len(found) == 1

"""The shapes world's seeded layout (mutation round 30c): a seed gives the same objects, colours and boxes from one
version to the next, so a render, the eval set's ground truth and pretraining data stay what they were."""

from __future__ import annotations

import random

from imgalign import shapes as W


def test_a_seed_lays_out_the_same_boxes_and_colours_as_before():
    """Seed 0 for four crosses (a crowded image, where an object often needs several tries at a place) and for a
    position prompt: the boxes and colours the layout has always drawn (the number of tries per object is part of
    the draw)."""
    crosses = W.layout(W.counting("cross", 4), random.Random(0))
    assert [(o.color, o.box) for o in crosses] == [
        ("blue", (3, 17, 24, 38)),
        ("purple", (33, 9, 51, 27)),
        ("green", (35, 39, 54, 58)),
        ("yellow", (14, 44, 32, 62)),
    ]
    placed = W.layout(W.position("circle", "left of", "square"), random.Random(0))
    assert [(o.shape, o.color, o.box, o.clause) for o in placed] == [
        ("square", "purple", (30, 5, 51, 26), 0),
        ("circle", "white", (1, 38, 18, 55), 1),
    ]

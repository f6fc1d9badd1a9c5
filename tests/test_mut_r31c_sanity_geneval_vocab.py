"""A count corruption draws each other count the counting task holds (2, 3 and 4), so a spec of two is corrupted to
four too (round 31c survivor S9: (2, 3, 4) as (2, 3) went unnoticed); the geneval reward's vocabulary check takes
every shape of the world (survivor G8: the last shape refused went unnoticed)."""

from __future__ import annotations

import random

from imgalign import shapes as W
from imgalign.rewards.geneval import check_shapes_vocabulary
from imgalign.rewards.sanity import corrupt_spec


def test_a_count_corruption_draws_every_other_count_of_the_task() -> None:
    for n, others in ((2, {3, 4}), (3, {2, 4}), (4, {2, 3})):
        rng = random.Random(0)
        drawn = {
            corrupt_spec(W.counting("circle", n), rng, ("count",))[0].include[0].count for _ in range(40)
        }
        assert drawn == others


def test_every_shape_and_colour_of_the_world_passes_the_vocabulary_check() -> None:
    for shape in W.SHAPES:
        for color in W.COLORS:
            check_shapes_vocabulary(
                {"include": [{"class": shape, "count": 1, "color": color}], "exclude": []}
            )
        check_shapes_vocabulary({"include": [{"class": "circle", "count": 1}], "exclude": [{"class": shape}]})

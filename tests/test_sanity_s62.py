"""`rewards check`'s colour corruption changes a clause's colour only."""

from __future__ import annotations

import random

from imgalign import shapes as W
from imgalign.rewards.sanity import corrupt_spec


def test_a_colour_change_keeps_the_clause_s_place() -> None:
    # a coloured clause with a relation (a user's GenEval-layout prompt) lost its relation with its colour changed:
    # the corrupted prompt asked for less than the true one, not for something else
    spec = W.Spec(
        "position",
        (W.Clause("square", color="red"), W.Clause("circle", color="blue", position=("left of", 0))),
    )
    for seed in range(20):
        bad, kind = corrupt_spec(spec, random.Random(seed), kinds=("colour",))
        assert kind == "colour"
        assert [c.position for c in bad.include] == [None, ("left of", 0)]
        assert [c.shape for c in bad.include] == ["square", "circle"]
        assert sum(b.color != c.color for b, c in zip(bad.include, spec.include)) == 1

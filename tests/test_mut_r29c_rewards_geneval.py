"""Mutation round 29 (helper c): ``rewards.geneval``: GenEvalReward built from Python (not through build_reward,
whose option check reads the Literal) refuses an unknown mode by name, before any scoring (it was a KeyError on the
first batch)."""

from __future__ import annotations

import pytest

from imgalign.rewards.geneval import GenEvalReward


def test_an_unknown_mode_given_to_the_class_is_refused_by_name() -> None:
    with pytest.raises(
        ValueError, match=r"^geneval reward: mode must be one of strict, partial, soft, got 'dense'$"
    ):
        GenEvalReward(mode="dense")  # type: ignore[arg-type]

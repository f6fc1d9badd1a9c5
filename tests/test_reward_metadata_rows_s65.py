"""Metadata given to a reward from Python is None or one dict per image: a string of as many characters as there
are images, or a list of prompts in its place, passed the length check and failed inside the reward ("string
indices must be integers", naming nothing)."""

from __future__ import annotations

import pytest
import torch

from imgalign.rewards.base import build_reward


def test_metadata_that_is_not_one_dict_per_image_is_refused_naming_the_reward() -> None:
    reward = build_reward("geneval")
    x = torch.zeros(2, 3, 16, 16)
    with pytest.raises(ValueError) as e:
        reward(x, ["a circle", "a square"], "ab")
    assert str(e.value) == (
        "reward 'geneval': metadata must be a list of 2 dicts (a prompt's GenEval row), one per image, or None; str"
    )
    with pytest.raises(ValueError, match=r"or None; row 1 is str$"):
        reward(x, ["a circle", "a square"], [{"tag": "single_object"}, "a square"])
    with pytest.raises(ValueError, match=r"or None; int$"):
        reward(x, ["a circle", "a square"], 3)


def test_metadata_rows_may_be_none_for_an_image_without_one() -> None:
    """None in place of one image's row is a row left empty (the trainer's task tagging reads such rows), not an
    error."""
    from imgalign.rewards.base import FunctionReward

    seen = []
    reward = FunctionReward(
        lambda images, prompts, metadata: seen.append(metadata) or [0.0, 0.0], name="rows"
    )
    reward(torch.zeros(2, 3, 8, 8), ["a", "b"], [None, {"tag": "single_object"}])
    assert seen == [[None, {"tag": "single_object"}]]

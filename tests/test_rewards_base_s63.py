"""A reward's scores given as text are refused naming the reward, not read as numbers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from imgalign.rewards.base import FunctionReward, Reward, RewardOutput

IMAGES = torch.rand(2, 3, 8, 8)
PROMPTS = ["a red circle", "a blue square"]


@pytest.mark.parametrize(
    "scores",
    [["0.5", "1"], ("0.5", 1.0), np.array(["0.5", "1"]), np.array([0.5, "1"], dtype=object), [[0.5], [b"1"]]],
    ids=["list", "tuple", "str-array", "object-array", "nested-bytes"],
)
def test_a_function_returning_text_scores_is_refused(scores: Any) -> None:
    # ["0.5", "1"] was scored (and trained on) as [0.5, 1.0], without a word
    reward = FunctionReward(lambda images, prompts, metadata: scores, name="plug")
    with pytest.raises(
        ValueError, match=r"^reward 'plug' returned text \(b?'(0\.5|1)'\) among its scores; it must"
    ):
        reward(IMAGES, PROMPTS)


def test_a_reward_class_returning_text_scores_is_refused() -> None:
    class Text(Reward):
        name = "txt"

        def score(self, images: torch.Tensor, prompts: list[str], metadata: Any) -> RewardOutput:
            return RewardOutput(scores=["0.25", "0.75"])  # type: ignore[arg-type]

    with pytest.raises(ValueError, match=r"^reward 'txt' returned text \('0.25'\) among its scores"):
        Text()(IMAGES, PROMPTS)


@pytest.mark.parametrize("scores", [[0.5, 1], np.array([0.5, 1.0]), np.array([0.5, 1], dtype=object), (1, 0)])
def test_numbers_in_any_container_are_still_scores(scores: Any) -> None:
    reward = FunctionReward(lambda images, prompts, metadata: scores, name="plug")
    assert reward(IMAGES, PROMPTS).scores.tolist() == [float(v) for v in scores]

"""A reward's complex scores are refused naming the reward, not cast to their real parts."""

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
    [torch.tensor([1 + 5j, 0.5 + 0j]), np.array([1 + 5j, 0.5 + 0j])],
    ids=["tensor", "array"],
)
def test_a_function_returning_complex_scores_is_refused(scores: Any) -> None:
    # they were scored (and trained on) as [1.0, 0.5], without a word
    reward = FunctionReward(lambda images, prompts, metadata: scores, name="plug")
    with pytest.raises(
        ValueError, match=r"^reward 'plug' returned complex scores \(.*complex.*\); it must return real"
    ):
        reward(IMAGES, PROMPTS)


def test_a_reward_class_returning_complex_scores_is_refused() -> None:
    class Complex(Reward):
        name = "cplx"

        def score(self, images: torch.Tensor, prompts: list[str], metadata: Any) -> RewardOutput:
            return RewardOutput(scores=torch.tensor([1 + 5j, 0.5 + 0j]))

    with pytest.raises(ValueError, match=r"^reward 'cplx' returned complex scores \(torch.complex64\)"):
        Complex()(IMAGES, PROMPTS)


def test_real_scores_of_any_float_dtype_still_pass() -> None:
    for scores in (torch.tensor([1.0, 0.5], dtype=torch.float64), np.array([1, 0]), [0.25, 0.75]):
        out = FunctionReward(lambda images, prompts, metadata, s=scores: s, name="plug")(IMAGES, PROMPTS)
        assert out.scores.dtype == torch.float32 and out.scores.shape == (2,)

"""Mutation round 26b (helper I): complex scores in a RewardOutput (a numpy array or a list) are refused naming
the reward, as complex tensors are."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from imgalign.rewards.base import Reward, RewardOutput

IMAGES = torch.rand(2, 3, 8, 8)
PROMPTS = ["a red circle", "a blue square"]


@pytest.mark.parametrize(
    "scores",
    [np.array([1 + 5j, 0.5 + 0j]), [1 + 5j, 0.5]],
    ids=["array-in-RewardOutput", "list-in-RewardOutput"],
)
def test_complex_scores_in_a_reward_output_are_refused_not_cast_to_their_real_parts(scores: Any) -> None:
    """RewardOutput(scores=<complex numpy array or list>): numpy's cast to float32 dropped the imaginary parts
    before the complex check looked (it saw a float tensor), so 1+5j was scored, and trained on, as 1.0."""

    class Complex(Reward):
        name = "cplx"

        def score(self, images: torch.Tensor, prompts: list[str], metadata: Any) -> RewardOutput:
            return RewardOutput(scores=scores)

    with pytest.raises(ValueError, match=r"^reward 'cplx' returned complex scores \(complex128\)"):
        Complex()(IMAGES, PROMPTS)

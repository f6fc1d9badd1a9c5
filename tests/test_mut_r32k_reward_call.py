"""Mutation round 32k: rewards/base.Reward.__call__'s in-place guard and its restore of the gradient mode: a
batch made under torch.inference_mode (which keeps no version counter) is scored, and a reward that switched
gradients off and then raised leaves them as they were."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from imgalign.rewards.base import build_reward

torch.set_num_threads(1)

HERE = "tests.test_mut_r32k_reward_call"


def mean_reward(images: torch.Tensor, prompts: list[str], metadata: Any = None) -> torch.Tensor:
    return images.mean((1, 2, 3))


def grad_off_then_fails(images: torch.Tensor, prompts: list[str], metadata: Any = None) -> torch.Tensor:
    torch.set_grad_enabled(False)
    raise RuntimeError("the reward's own failure")


def test_a_batch_made_under_inference_mode_is_scored() -> None:
    with torch.inference_mode():
        images = torch.rand(2, 3, 8, 8)
    out = build_reward(f"{HERE}:mean_reward")(images, ["a", "b"])
    assert torch.allclose(out.scores, images.mean((1, 2, 3)))


def test_a_reward_that_switched_gradients_off_and_raised_leaves_them_on() -> None:
    try:
        with pytest.raises(RuntimeError, match="the reward's own failure"):
            build_reward(f"{HERE}:grad_off_then_fails")(torch.rand(2, 3, 8, 8), ["a", "b"])
        assert torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(True)

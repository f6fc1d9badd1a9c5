"""rewards.base: the reward contract's edges that round 23's mutants of Reward.__call__ and to_tensor left open."""

from __future__ import annotations

import pytest
import torch

from imgalign.rewards.base import FunctionReward, RewardOutput


def _mean_reward() -> FunctionReward:
    return FunctionReward(lambda images, prompts, metadata: images.mean(dim=(1, 2, 3)), name="mean")


def test_more_prompts_than_images_is_refused_as_fewer_are() -> None:
    """Three prompts for two images is a misaligned batch, refused by count like one prompt for two (B05)."""
    with pytest.raises(ValueError, match="got 2 images but 3 prompts"):
        _mean_reward()(torch.full((2, 3, 4, 4), 0.5), ["a", "b", "c"])


def test_more_details_than_images_are_refused_as_fewer_are() -> None:
    """Three details rows for two images would be zipped with the images off by one: refused by count (B17)."""

    def tagged(images, prompts, metadata):
        return RewardOutput(images.mean(dim=(1, 2, 3)), [{"i": i} for i in range(len(prompts) + 1)])

    with pytest.raises(RuntimeError, match="returned 3 details for 2 images"):
        FunctionReward(tagged, name="tagged")(torch.full((2, 3, 4, 4), 0.5), ["a", "b"])

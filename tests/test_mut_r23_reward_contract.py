"""rewards.base: the reward contract's edges that round 23's mutants of Reward.__call__ and to_tensor left open."""

from __future__ import annotations

import pytest
import torch

from imgalign.rewards.base import FunctionReward, Reward, RewardOutput


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

    with pytest.raises(ValueError, match="returned 3 details for 2 images"):
        FunctionReward(tagged, name="tagged")(torch.full((2, 3, 4, 4), 0.5), ["a", "b"])


class _Double(Reward):
    """A differentiable reward that computes its scores in float64."""

    name = "double"
    differentiable = True

    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict] | None) -> RewardOutput:
        return RewardOutput(images.double().mean(dim=(1, 2, 3)))


def test_a_differentiable_rewards_float64_scores_come_back_float32_with_their_graph() -> None:
    """The contract's scores are float32 [B] on the CPU for every reward: a differentiable one computing in float64
    gave float64 scores (only the others were cast); the cast keeps the graph (round 23, B14 and B12's neighbour)."""
    x = torch.full((2, 3, 2, 2), 0.5, requires_grad=True)
    scores = _Double()(x, ["a", "b"]).scores
    assert scores.dtype == torch.float32 and scores.device.type == "cpu" and scores.shape == (2,)
    scores.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((2, 3, 2, 2), 1 / 12))

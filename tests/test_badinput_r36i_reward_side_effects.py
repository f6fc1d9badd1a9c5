"""Bad-input round 36i: a plug-in reward (``module:attr``) that changes what it was given or the process's state: the
images in place, the gradient mode, the default dtype."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from imgalign.rewards.base import build_reward
from imgalign.trainers.rewarding import score_all

torch.set_num_threads(1)

HERE = "tests.test_badinput_r36i_reward_side_effects"


def zeroes_images(images: torch.Tensor, prompts: list[str], metadata: Any = None) -> torch.Tensor:
    s = images.mean((1, 2, 3)).clone()
    images.mul_(0)
    return s


def mean_reward(images: torch.Tensor, prompts: list[str], metadata: Any = None) -> torch.Tensor:
    return images.mean((1, 2, 3))


def grad_off(images: torch.Tensor, prompts: list[str], metadata: Any = None) -> torch.Tensor:
    torch.set_grad_enabled(False)
    return images.mean((1, 2, 3))


def float64_default(images: torch.Tensor, prompts: list[str], metadata: Any = None) -> torch.Tensor:
    torch.set_default_dtype(torch.float64)
    return images.mean((1, 2, 3))


def test_a_reward_that_changes_the_batch_in_place_is_refused_naming_it() -> None:
    """Every reward of a training step scores the same image tensor: a plug-in that zeroed it in place made the next
    reward score black images (round 36i: red_reward's mean 0.0 instead of -0.049), silently."""
    images = torch.rand(4, 3, 8, 8)
    rewards = {"zeroes": build_reward(f"{HERE}:zeroes_images"), "mean": build_reward(f"{HERE}:mean_reward")}
    with pytest.raises(
        ValueError, match=r"reward 'zeroes_images' changed the images it was given in place"
    ) as e:
        score_all(rewards, images, ["a"] * 4, [{}] * 4)
    assert "images = images.clone()" in str(e.value)


def test_a_reward_that_works_on_a_copy_or_is_given_a_copy_is_scored() -> None:
    """Only the caller's own tensor is guarded: a reward reading it, or one given PIL images (a copy), is scored."""
    images = torch.rand(4, 3, 8, 8)
    before = images.clone()
    assert torch.allclose(
        build_reward(f"{HERE}:mean_reward")(images, [""] * 4).scores, before.mean((1, 2, 3))
    )
    assert torch.equal(images, before)
    half = images.half()  # a copy is made (as float32) before the reward sees it
    build_reward(f"{HERE}:zeroes_images")(half, [""] * 4)


@pytest.mark.parametrize("reward", ["grad_off", "float64_default"])
def test_a_reward_that_changes_the_grad_mode_or_default_dtype_leaves_them_as_they_were(reward: str) -> None:
    """A plug-in reward that called torch.set_grad_enabled(False) switched gradients off for the trainer: its loss
    had no graph, and the error blamed the objective ('objective 'grpo': loss(...) returned a loss without a
    graph'). Both settings are set back after the reward's call."""
    try:
        out = build_reward(f"{HERE}:{reward}")(torch.rand(2, 3, 8, 8), ["a", "b"])
        assert torch.is_grad_enabled()
        assert torch.get_default_dtype() == torch.float32
        assert out.scores.shape == (2,)
    finally:
        torch.set_grad_enabled(True)
        torch.set_default_dtype(torch.float32)


def test_the_grad_mode_of_a_caller_under_no_grad_is_kept() -> None:
    with torch.no_grad():
        build_reward(f"{HERE}:mean_reward")(torch.rand(2, 3, 8, 8), ["a", "b"])
        assert not torch.is_grad_enabled()
    assert torch.is_grad_enabled()

"""rewards.base edges round 20's mutants left open (round 21b: B27)."""

from __future__ import annotations

import pytest
import torch

from imgalign.rewards.base import FunctionReward, to_tensor


def test_an_empty_list_of_images_is_refused_in_plain_words() -> None:
    """No images at all: "no images given", not numpy's "need at least one array to stack" (B27)."""
    with pytest.raises(ValueError, match="^no images given$"):
        to_tensor([])
    reward = FunctionReward(lambda images, prompts, metadata: torch.zeros(len(prompts)), name="zeros")
    with pytest.raises(ValueError, match="^no images given$"):
        reward([], [])

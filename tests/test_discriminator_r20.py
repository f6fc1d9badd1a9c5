"""Round 20 (stop 57) tests of rewards/discriminator.py: options, scoring, online updates and resume."""

import pytest
import torch

from imgalign.rewards.base import build_reward

torch.set_num_threads(1)

ONLINE = "discriminator:features=stats,ref_size=8"


def test_steps_below_1_are_refused_by_name_and_1_is_taken() -> None:
    """steps=0 made update() a no-op that still marked the head trained (and referenced an unset loss)."""
    with pytest.raises(ValueError, match="steps must be a number >= 1, got 0"):
        build_reward(f"{ONLINE},steps=0")
    assert build_reward(f"{ONLINE},steps=1").steps == 1

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


def test_an_update_that_fails_leaves_a_fresh_online_head_not_ready() -> None:
    """update() marked the head trained before it read the images: one that failed on them (here a batch of the
    wrong shape) left a fresh head, which scores noise, saying it was ready (own fixes, stop 57)."""
    r = build_reward("discriminator:features=stats,ref_size=8,hidden=8")
    assert not r.ready()
    with pytest.raises(Exception):  # noqa: B017 (whatever the encoder raises on it)
        r.update(torch.rand(2, 5))
    assert not r.ready()
    r.update(torch.rand(2, 3, 32, 32))
    assert r.ready()

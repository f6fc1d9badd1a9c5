"""Mutation round 26 (trainers/rewarding.py): behaviour of the reward plumbing no earlier test pinned down."""

from __future__ import annotations

import pytest
import torch

from imgalign.trainers.rewarding import Balanced, balance

torch.set_num_threads(1)


def test_a_balancer_returning_one_advantage_per_finite_sample_only_is_refused_by_length() -> None:
    """A balancer must return one advantage and one valid flag per scored sample. One that returns them for its finite
    samples only (3 of 4: a 1-D tensor of the wrong length) is refused naming the shape it returned and the one it
    must have; a mutant that checked only the number of dimensions passed it on to fail inside the update."""
    rewards = torch.tensor([[1.0, 2.0, float("nan"), 4.0]])  # [K=1, N=4]
    args = (rewards, torch.ones(1), torch.zeros(4, dtype=torch.long), torch.isfinite(rewards), "group", 5.0)

    def short_advantages(*_: object) -> Balanced:
        return Balanced(torch.zeros(3), torch.ones(4, dtype=torch.bool), 0.0)

    def long_valid(*_: object) -> Balanced:
        return Balanced(torch.zeros(4), torch.ones(5, dtype=torch.bool), 0.0)

    with pytest.raises(ValueError, match=r"returned advantages as torch.float32 \(3,\); .* shape \(4,\)"):
        balance("short", short_advantages, *args)
    with pytest.raises(ValueError, match=r"returned valid as torch.bool \(5,\); .* shape \(4,\)"):
        balance("long", long_valid, *args)

    def right(*_: object) -> Balanced:
        return Balanced(torch.zeros(4), torch.ones(4, dtype=torch.bool), 0.0)

    assert balance("right", right, *args).advantages.shape == (4,)

"""Mutation round 30b (trainers/rewarding.py): MARBLE's placeholder advantages are the weighted MEAN of the
per-reward advantages for any weights, also weights whose sum is below 1 (imgalign train passes ones)."""

import torch

from imgalign.trainers.rewarding import marble


def test_marble_placeholder_advantages_normalise_weights_that_sum_below_one():
    rewards = torch.tensor([[0.0, 1.0, 2.0, 4.0], [3.0, 1.0, 0.0, 2.0]])
    group_ids = torch.zeros(4, dtype=torch.long)
    finite = torch.ones(2, 4, dtype=torch.bool)
    out = marble(rewards, torch.tensor([0.1, 0.3]), group_ids, finite, "group", 5.0)
    assert out.per_reward is not None
    torch.testing.assert_close(out.advantages, 0.25 * out.per_reward[0] + 0.75 * out.per_reward[1])
    same = marble(rewards, torch.tensor([1.0, 3.0]), group_ids, finite, "group", 5.0)
    torch.testing.assert_close(out.advantages, same.advantages)

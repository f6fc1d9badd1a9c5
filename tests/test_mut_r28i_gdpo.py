"""Mutation round 28 (helper i): ``trainers.rewarding.gdpo`` on an empty batch gives empty advantages and a
zero_std_ratio of 0, as the other balancers do (no division by its 0 groups)."""

from __future__ import annotations

import torch

from imgalign.trainers.rewarding import gdpo, group_norm_weighted, weighted_sum


def test_every_balancer_takes_an_empty_batch() -> None:
    rewards = torch.zeros(2, 0)
    group_ids = torch.zeros(0, dtype=torch.long)
    finite = torch.ones(2, 0, dtype=torch.bool)
    for fn in (gdpo, weighted_sum, group_norm_weighted):
        bal = fn(rewards, torch.ones(2), group_ids, finite, "group", 5.0)
        assert bal.zero_std_ratio == 0.0, fn.__name__
        assert bal.advantages.shape == (0,) and bal.valid.shape == (0,), fn.__name__

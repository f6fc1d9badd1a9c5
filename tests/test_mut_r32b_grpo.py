"""Mutation round 32b: trainers/grpo.group_advantages judges a tie by the population std (unbiased=False), the std it
normalises with: a pair whose population std is under tie_tol is dropped even though its sample std is over it."""

from __future__ import annotations

import torch

from imgalign.trainers.grpo import group_advantages


def test_a_tie_is_judged_by_the_population_std_of_the_group() -> None:
    # group 0: rewards 0 and 0.18, population std 0.09 <= tie_tol 0.1 (sample std 0.127 > 0.1); group 1 far apart
    out = group_advantages(
        torch.tensor([0.0, 0.18, 0.0, 1.0]), torch.tensor([0, 0, 1, 1]), tie_tol=0.1, clip=None
    )
    assert out.valid.tolist() == [False, False, True, True]
    assert out.zero_std_ratio == 0.5
    assert out.advantages[:2].tolist() == [0.0, 0.0]
    assert torch.allclose(out.advantages[2:], torch.tensor([-1.0, 1.0]), atol=1e-3)

"""Round 20 (stop 57) tests of trainers/rewarding.py: how the trainer's reward rows reach the balancers."""

import pytest
import torch

from imgalign.trainers.rewarding import gdpo

torch.set_num_threads(1)


@pytest.mark.parametrize("std_mode", ["group", "global"])
def test_gdpo_with_a_logged_only_reward_trains_as_without_it(std_mode: str) -> None:
    """Group 0 ties on the reward of weight 1 while the reward of weight 0 (logged only) varies there: the group
    carries no signal and is dropped, as without the logged-only reward. It was kept valid with advantage 0, which
    entered the batch statistics and scaled group 1's advantages from 1.22 to 1.73 (zero_std_ratio 0, not 0.5)."""
    scores = torch.tensor([[1.0, 1.0, 1.0, 0.0, 1.0, 2.0], [0.0, 1.0, 2.0, 3.0, 3.0, 1.0]])
    gid = torch.tensor([0, 0, 0, 1, 1, 1])
    finite = torch.ones(2, 6, dtype=torch.bool)
    both = gdpo(scores, torch.tensor([1.0, 0.0]), gid, finite, std_mode, None)
    alone = gdpo(scores[:1], torch.tensor([1.0]), gid, finite[:1], std_mode, None)
    assert alone.valid.tolist() == [False, False, False, True, True, True] and alone.zero_std_ratio == 0.5
    assert both.valid.tolist() == alone.valid.tolist() and both.zero_std_ratio == alone.zero_std_ratio
    torch.testing.assert_close(both.advantages, alone.advantages)
    # a reward of weight > 0 that varies there keeps the group
    kept = gdpo(scores, torch.tensor([1.0, 0.5]), gid, finite, std_mode, None)
    assert kept.valid.all() and kept.zero_std_ratio == 0.0

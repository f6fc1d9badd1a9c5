import torch

from imgalign.trainers.rewarding import gdpo


def test_gdpo_zero_std_ratio_of_a_single_tied_group_is_one():
    """One prompt group whose rewards all tie carries no signal: the whole batch (one group of one) is tied."""
    rewards = torch.tensor([[0.5, 0.5, 0.5, 0.5], [1.0, 1.0, 1.0, 1.0]])
    group_ids = torch.zeros(4, dtype=torch.long)
    finite = torch.ones(2, 4, dtype=torch.bool)
    bal = gdpo(rewards, torch.ones(2), group_ids, finite, "group", 5.0)
    assert bal.zero_std_ratio == 1.0
    assert not bal.valid.any() and bool((bal.advantages == 0).all())
    varied = gdpo(
        rewards + torch.tensor([0.0, 0.1, 0.2, 0.3]), torch.ones(2), group_ids, finite, "group", 5.0
    )
    assert varied.zero_std_ratio == 0.0 and bool(varied.valid.all())

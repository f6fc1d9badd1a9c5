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


def test_gdpo_with_every_weight_0_drops_every_group_as_the_other_balancers_do():
    """No reward of weight > 0: no group carries signal, so none is valid (gdpo kept the groups whose logged-only
    rewards varied, valid with advantage 0, where weighted_sum and group_norm_weighted drop them all)."""
    from imgalign.trainers.rewarding import group_norm_weighted, weighted_sum

    rewards = torch.tensor([[0.1, 0.5, 0.2, 0.9], [1.0, 2.0, 3.0, 4.0]])
    group_ids = torch.tensor([0, 0, 1, 1])
    finite = torch.ones(2, 4, dtype=torch.bool)
    for fn in (gdpo, weighted_sum, group_norm_weighted):
        bal = fn(rewards, torch.zeros(2), group_ids, finite, "group", 5.0)
        assert not bal.valid.any(), fn.__name__
        assert bal.zero_std_ratio == 1.0 and bool((bal.advantages == 0).all()), fn.__name__

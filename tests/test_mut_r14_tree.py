"""Tree rollouts (mutation round 14): behaviour of trainers/tree.py that the other tree tests left open."""

import math

import pytest
import torch

from imgalign.trainers.tree import TreeConfig, TreeSpec, propagate_values, tree_rollout

torch.set_num_threads(1)


def test_config_accepts_one_branching_factor_per_branch_step():
    """branch_factors may give one factor per branch step (not only a single shared one): validate() passes and
    the spec keeps each step's own factor."""
    cfg = TreeConfig(branch_steps=[0, 2, 3], branch_factors=[2, 3, 4])
    cfg.validate()
    assert cfg.spec(5) == TreeSpec(5, (0, 2, 3), (2, 3, 4)) and cfg.spec(5).num_leaves == 24


def test_spec_of_two_sampling_steps_branches_at_step_zero():
    """num_steps = 2 is the smallest valid schedule: step 0 is trainable (step 1, sigma -> 0, is not)."""
    spec = TreeSpec(2, (0,), (3,))
    assert spec.num_leaves == 3 and spec.nfe() == 1 + 3 and spec.num_edges() == 3


def test_rollout_roots_have_parent_minus_one_and_depth_zero():
    """Node bookkeeping of the roots (one per tree): parent -1 (they have none; node 0 is a real node), depth 0,
    their own tree index."""
    roll = tree_rollout(
        lambda x, s, r: -x,
        torch.zeros(3, 1, 1, 1),
        torch.linspace(1.0, 0.0, 4),
        TreeSpec(3, (1,), (2,)),
        generator=torch.Generator().manual_seed(0),
    )
    assert roll.node_parent[:3].tolist() == [-1, -1, -1]
    assert roll.node_depth[:3].tolist() == [0, 0, 0] and roll.node_root[:3].tolist() == [0, 1, 2]
    assert roll.node_parent[3:].tolist() == [0, 0, 1, 1, 2, 2]


def test_logprob_weights_are_stable_for_a_large_log_density_gap_between_siblings():
    """The softmax over siblings subtracts the siblings' MAX logit: with logits 0 and 200 (float32 exp(200)
    overflows) the weights are (~0, 1), so node 1 takes its second leaf's value, finite."""
    parent = torch.tensor([-1, 0, 0, 1, 1, 2, 2])
    depth = torch.tensor([0, 1, 1, 2, 2, 2, 2])
    leaves = torch.tensor([3, 4, 5, 6])
    r = torch.tensor([1.0, 3.0, 5.0, 9.0])
    logit = torch.tensor([0.0, 0.0, 0.0, 0.0, 200.0, 0.0, 0.0])
    vals = propagate_values(parent, depth, leaves, r, logit)
    assert torch.isfinite(vals).all()
    assert vals[1] == pytest.approx(3.0) and vals[0] == pytest.approx((3.0 + 7.0) / 2)
    assert math.isclose(float(vals[2]), 7.0)


def test_sde_mean_std_keeps_a_float64_sigma_in_float64():
    """The SDE coefficients are computed in float64 from the sigmas as given: a float64 sigma of 1 - 1e-7 keeps its
    own denominator 1 - sigma = 1e-7 (rounded to float32 it would be 1 - 2^-23 ~ 1.19e-7, a 9% smaller std)."""
    from imgalign.trainers.tree import flow_sde_mean_std

    s = torch.tensor([1.0 - 1e-7], dtype=torch.float64)
    sn = torch.tensor([0.5], dtype=torch.float64)
    _, std = flow_sde_mean_std(torch.zeros(1, 2), torch.zeros(1, 2), s, sn, 0.7)
    want = 0.7 * math.sqrt((1.0 - 1e-7) / 1e-7) * math.sqrt(0.5 - 1e-7)
    assert float(std[0]) == pytest.approx(want, rel=1e-6)

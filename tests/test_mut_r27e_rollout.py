"""Mutation round 27 (helper e): a tree rollout's credit when no edge can train logs 0, not NaN."""

from __future__ import annotations

import math

import torch


def test_tree_credit_with_every_leaf_masked_logs_zero_not_nan():
    """Every leaf masked by the balancer (all rewards non-finite, say): no edge is valid, every advantage is 0, and
    the logged tree/edge_valid_ratio and tree/edge_adv_abs_mean are 0; the mean of no edges was NaN in the log."""
    from test_mut_r21b_tree import _roll, _sampling

    from imgalign.trainers.rewarding import Balanced

    s = _sampling(group_size=6, branch_factors=[2, 3])
    ro = _roll(s)
    adv, valid = ro.extras["credit"](
        torch.zeros(1, 12), Balanced(torch.full((12,), float("nan")), torch.zeros(12, dtype=torch.bool), 0.0)
    )
    assert not bool(valid.any()) and bool((adv == 0).all())
    m = ro.extras["metrics"]
    assert m["tree/edge_valid_ratio"] == 0.0
    assert not math.isnan(m["tree/edge_adv_abs_mean"]) and m["tree/edge_adv_abs_mean"] == 0.0

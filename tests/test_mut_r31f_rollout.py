"""Mutation round 31: a tree rollout's credit masks exactly the edges whose subtree has no valid leaf and logs the
valid edges' mean |advantage|; its logged rollout NFE is the rollout's own, with and without CFG."""

from __future__ import annotations

import pytest
import torch
from test_mut_r21b_tree import _roll, _sampling

from imgalign.trainers.rewarding import Balanced

torch.set_num_threads(1)


def test_tree_credit_drops_only_the_masked_leafs_edge_and_logs_the_valid_edges_mean_abs_advantage():
    """Two trees of branch factors 2 then 3 (8 edges each), leaf 4 masked by the balancer (advantage 0, the valid
    leaves' mean): the one edge whose subtree holds no valid leaf (leaf 4's own) is invalid, the other 15 are valid
    (distinct advantages: no tied tree), and tree/edge_adv_abs_mean is the mean |advantage| of those 15, not of
    every edge."""
    ro = _roll(_sampling(group_size=6, branch_factors=[2, 3]))
    rows = ro.extras["tree"]
    adv_in = torch.linspace(-1, 1, 12)
    adv_in[4] = 0.0
    leaf_valid = torch.ones(12, dtype=torch.bool)
    leaf_valid[4] = False
    adv, valid = ro.extras["credit"](torch.zeros(1, 12), Balanced(adv_in, leaf_valid, 0.0))
    assert int(rows.child_mask.sum()) == 16
    assert int(valid.sum()) == 15
    m = ro.extras["metrics"]
    assert m["tree/edge_adv_abs_mean"] == pytest.approx(float(adv[valid].abs().mean()), rel=1e-6)
    assert m["tree/edge_adv_abs_mean"] != pytest.approx(float(adv[rows.child_mask].abs().mean()), rel=1e-3)


@pytest.mark.parametrize("guidance", [1.0, 4.5])
def test_a_tree_rollouts_logged_nfe_is_its_own_with_and_without_cfg(guidance: float):
    """perf/rollout_nfe is the NFE the tree rollout spent (Rollout.nfe): CFG (guidance > 1) counts 2 per velocity,
    no CFG 1; the flag passed to nfe_report the other way round logged half or twice the cost."""
    ro = _roll(_sampling(guidance=guidance))
    assert ro.extras["metrics"]["perf/rollout_nfe"] == float(ro.nfe)

"""Mutation round 21, second pass (stop 58): tree rollouts on the closed-form flow adapter (no model loads):
the GRPO objective's single term over parent rows, its ratio metrics over valid edges and its norm-ratio buckets
by each row's branch step, and the SDE step's σ = 1 guard of kernel_mean_std (the tiny-SD3 tree tests take
seconds each)."""

from __future__ import annotations

import pytest
import torch
from test_mut_r21_objectives import _Adapter, _Net

from imgalign.trainers import kernels as K
from imgalign.trainers.config import ObjectiveConfig, SamplingConfig
from imgalign.trainers.objectives import GRPOObjective, TrainContext
from imgalign.trainers.rewarding import Balanced
from imgalign.trainers.rollout import ROLLOUTS, Rollout, RolloutContext, kernel_mean_std
from imgalign.trainers.testing import ClosedFormFlow, tree_sampling

torch.set_num_threads(1)

PROMPTS = ("ab", "cdef")


def _sampling(group_size: int = 4, guidance: float = 1.0, **tree) -> SamplingConfig:
    return tree_sampling(group_size, guidance, **{"branch_steps": [0, 2], "branch_factors": [2], **tree})


def _roll(s: SamplingConfig, step: int = 0, reduce: str = "sum") -> Rollout:
    g = s.group_size
    prompts = [p for p in PROMPTS for _ in range(g)]
    ctx = RolloutContext(ClosedFormFlow(), None, s, seed=3, step=step, logprob_reduce=reduce)
    ids = torch.arange(2 * g)
    return ROLLOUTS.get("tree")(ctx, prompts, [{}] * 2 * g, ids, ids // g)


def test_grpo_trains_a_tree_rollout_in_one_term_over_its_parent_rows():
    """Tree rows carry their own branch step: the objective has one term (0), not one per branch step (which
    would compute every parent row's loss once per branch step)."""
    ro = _roll(_sampling())
    assert ro.train_steps == [0, 2]
    assert GRPOObjective(ObjectiveConfig(), _sampling()).terms(ro) == [0]


def test_kernel_mean_std_guards_sigma_one_with_the_given_next_sigma_of_one():
    """kernel_mean_std('sde') at σ = 1 is kernels.flow_sde_mean_std with the given sigma_next_of_one (0.8
    here, not the row's own σ' = 0.6): finite, and the std of that guard."""
    g = torch.Generator().manual_seed(1)
    x, v = torch.randn(2, 4, 4, 4, generator=g), torch.randn(2, 4, 4, 4, generator=g)
    sig, sig_n = torch.tensor([1.0, 0.5]), torch.tensor([0.6, 0.3])
    mean, std = kernel_mean_std("sde", x, v, sig, sig_n, 0.7, 0.8)
    want_mean, want_std = K.flow_sde_mean_std(x, v, sig, sig_n, 0.7, 0.8)
    torch.testing.assert_close(std, want_std)
    torch.testing.assert_close(mean, want_mean)
    other = kernel_mean_std("sde", x, v, sig, sig_n, 0.7, 0.6)[1]
    assert torch.isfinite(std).all() and abs(float(other[0] - std[0])) > 1e-3


def _off_policy_tree(**cfg: object) -> tuple[_Adapter, SamplingConfig, Rollout, GRPOObjective]:
    """A tree rollout sampled by the reference (−0.5, 1.0) and a policy off it (−0.9, 0.9), with GRPO."""
    s = _sampling()
    adapter = _Adapter(_Net(-0.9, 0.9), _Net(-0.5, 1.0))
    g = s.group_size
    prompts = [p for p in PROMPTS for _ in range(g)]
    ctx = RolloutContext(adapter, adapter.ref, s, seed=3, step=0, logprob_reduce="sum")
    ids = torch.arange(2 * g)
    with torch.no_grad():
        ro = ROLLOUTS.get("tree")(ctx, prompts, [{}] * 2 * g, ids, ids // g)
    return adapter, s, ro, GRPOObjective(ObjectiveConfig(clip_range=10.0, **cfg), s)  # type: ignore[arg-type]


def test_tree_ratio_metrics_leave_out_a_masked_edge():
    """Off-policy, the edge with the smallest ratio exp(log π_θ − stored) masked invalid: policy/ratio_min is
    the smallest ratio of the other edges, not the masked one's."""
    adapter, s, ro, obj = _off_policy_tree()
    rows = ro.extras["tree"]
    k = rows.child_mask.shape[1]
    with torch.no_grad():
        v = adapter.transformer(rows.x, rows.sigma, rows.cond)
        mean = kernel_mean_std(
            s.kernel, rows.x, v, rows.sigma, rows.sigma_next, s.noise_level, rows.sigma_next_of_one
        )[0]
    lp = K.gaussian_log_prob(
        rows.children.flatten(0, 1), mean.repeat_interleave(k, 0), rows.std.repeat_interleave(k)
    )
    ratio = torch.exp(lp.double() - rows.old_log_prob.flatten()).view(-1, k)
    valid = rows.child_mask.clone()
    low = int(ratio.argmin())
    valid.view(-1)[low] = False
    kept = ratio[valid]
    assert float(kept.min()) > float(ratio.min()) * (1 + 1e-3)
    adv = torch.linspace(-1, 1, valid.numel()).view_as(valid)
    m = obj.loss(
        TrainContext(adapter, adapter.transformer, 0), ro, torch.arange(valid.shape[0]), 0, adv, valid
    )[1]
    assert m["policy/ratio_min"] == pytest.approx(float(kept.min()), rel=1e-4)
    assert m["policy/ratio_max"] == pytest.approx(float(kept.max()), rel=1e-4)


def test_tree_norm_ratios_are_logged_in_the_bucket_of_each_parent_rows_branch_step():
    """vnorm_log on a tree of branch steps 0 and 2 of 5: the parent rows of step 0 log under 'early', those of
    step 2 under 'middle' (each row's own step), and 'all' over every row."""
    adapter, s, ro, obj = _off_policy_tree(vnorm_log=True)
    rows = ro.extras["tree"]
    assert sorted(set(rows.step.tolist())) == [0, 2]
    credit = ro.extras["credit"](
        torch.zeros(1, 8), Balanced(torch.linspace(-1, 1, 8), torch.ones(8, dtype=torch.bool), 0.0)
    )
    m = obj.loss(
        TrainContext(adapter, adapter.transformer, 0), ro, torch.arange(rows.x.shape[0]), 0, *credit
    )[1]
    assert {k for k in m if k.startswith("vnorm/norm_ratio/")} == {
        "vnorm/norm_ratio/early",
        "vnorm/norm_ratio/middle",
        "vnorm/norm_ratio/all",
    }

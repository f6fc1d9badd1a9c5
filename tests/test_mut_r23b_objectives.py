"""Mutation round 23, second pass (stop 60): the GRPO objective's ratio on the configured log-density (reduction
and block noise) for flat and tree rollouts, and the tree loss's edge and row masks, on round 21's closed-form
flow model (no model loads)."""

from __future__ import annotations

import pytest
import torch
from test_mut_r21_objectives import _Adapter, _loss, _Net, _setup
from test_mut_r21b_tree import PROMPTS, _sampling

from imgalign.trainers import kernels as K
from imgalign.trainers.config import ObjectiveConfig
from imgalign.trainers.objectives import GRPOObjective, TrainContext
from imgalign.trainers.rollout import ROLLOUTS, Rollout, RolloutContext, kernel_mean_std

torch.set_num_threads(1)


@pytest.mark.parametrize(("reduce", "block"), [("mean", 1), ("sum", 2), ("mean", 2)])
def test_on_policy_the_ratio_is_one_under_the_configured_reduction_and_block_noise(reduce: str, block: int):
    """The policy equal to the model that sampled the rollout: every ratio exp(log π_θ − stored) is 1 when the
    objective evaluates the log-density as the rollout stored it (objective.logprob_reduce, sampling.noise_block),
    and the logged log-density is the stored one's valid-row mean."""
    adapter, s, ro = _setup({"num_steps": 3, "noise_block": block}, reduce=reduce)
    with torch.no_grad():
        adapter.transformer.load_state_dict(adapter.ref.state_dict())
    obj = GRPOObjective(ObjectiveConfig(logprob_reduce=reduce), s)  # type: ignore[arg-type]
    for i in ro.train_steps:
        _, m = _loss(obj, adapter, ro, i)
        assert m["policy/ratio_min"] == pytest.approx(1.0, abs=1e-5)
        assert m["policy/ratio_max"] == pytest.approx(1.0, abs=1e-5)
        stored = ro.log_probs[:, i][torch.tensor([True, True, False, True])].double().mean()
        assert m["policy/logprob"] == pytest.approx(float(stored), rel=1e-5)


def _tree(policy: tuple[float, float], reduce: str = "sum") -> tuple[_Adapter, Rollout]:
    """A tree rollout (branch steps 0 and 2 of 5, 2 children each) sampled by the reference (−0.5, 1.0) with the
    given log-density reduction; the policy is `policy`."""
    s = _sampling()
    adapter = _Adapter(_Net(*policy), _Net(-0.5, 1.0))
    g = s.group_size
    prompts = [p for p in PROMPTS for _ in range(g)]
    ctx = RolloutContext(adapter, adapter.ref, s, seed=3, step=0, logprob_reduce=reduce)
    ids = torch.arange(2 * g)
    with torch.no_grad():
        return adapter, ROLLOUTS.get("tree")(ctx, prompts, [{}] * 2 * g, ids, ids // g)


def _tree_loss(adapter: _Adapter, ro: Rollout, valid: torch.Tensor, **cfg: object) -> tuple[float, dict]:
    rows = ro.extras["tree"]
    obj = GRPOObjective(ObjectiveConfig(**cfg), _sampling())  # type: ignore[arg-type]
    adv = torch.linspace(-1, 1, valid.numel()).view_as(valid)
    loss, m = obj.loss(
        TrainContext(adapter, adapter.transformer, 0), ro, torch.arange(rows.x.shape[0]), 0, adv, valid
    )
    return float(loss.detach()), m


def _tree_kl(adapter: _Adapter, ro: Rollout, reduce: str) -> torch.Tensor:
    """Per parent row closed-form KL(π_θ ‖ π_ref) of its branching step, with the std the children used. [M]"""
    rows, s = ro.extras["tree"], _sampling()
    with torch.no_grad():
        means = [
            kernel_mean_std(
                s.kernel,
                rows.x,
                net(rows.x, rows.sigma, rows.cond),
                rows.sigma,
                rows.sigma_next,
                s.noise_level,
                rows.sigma_next_of_one,
            )[0]
            for net in (adapter.transformer, adapter.ref)
        ]
    return K.gaussian_kl_equal_std(means[0], means[1], rows.std, reduce)  # type: ignore[arg-type]


def test_a_tree_rollout_on_policy_has_ratio_one_with_a_mean_reduced_log_density():
    """logprob_reduce mean on a tree: the children's stored log-densities are means over the latent, and the
    objective evaluates them the same way, so on-policy every edge's ratio is 1."""
    adapter, ro = _tree((-0.5, 1.0), reduce="mean")
    valid = ro.extras["tree"].child_mask.clone()
    _, m = _tree_loss(adapter, ro, valid, logprob_reduce="mean")
    assert m["policy/ratio_min"] == pytest.approx(1.0, abs=1e-5)
    assert m["policy/ratio_max"] == pytest.approx(1.0, abs=1e-5)


def test_the_tree_kl_is_reduced_as_configured_and_averaged_over_rows_with_a_valid_edge():
    """Off-policy tree with kl_beta: policy/kl is the mean of the per-row closed-form KL over the parent rows
    that have a valid edge (row 0, every edge invalid, is left out), in the configured reduction (mean = sum/D)."""
    adapter, ro = _tree((-0.9, 0.9), reduce="mean")
    rows = ro.extras["tree"]
    valid = rows.child_mask.clone()
    valid[0] = False
    kl = _tree_kl(adapter, ro, "mean")
    keep = valid.any(1)
    assert abs(float(kl[0] - kl[keep].mean())) > 1e-3 * float(kl.mean())
    _, m = _tree_loss(adapter, ro, valid, logprob_reduce="mean", kl_beta=0.1)
    assert m["policy/kl"] == pytest.approx(float(kl[keep].double().mean()), rel=1e-5)


def test_a_tree_edge_with_child_mask_false_is_out_of_the_loss_even_when_marked_valid():
    """A padded edge (child_mask False) whose advantage is marked valid adds nothing: the loss equals the loss
    with that edge also marked invalid, and differs from the loss with the edge's padding lifted."""
    adapter, ro = _tree((-0.9, 0.9))
    rows = ro.extras["tree"]
    assert rows.child_mask.all()
    valid = rows.child_mask.clone()
    full = _tree_loss(adapter, ro, valid, clip_range=10.0)[0]
    rows.child_mask[0, 1] = False
    padded = _tree_loss(adapter, ro, valid, clip_range=10.0)[0]
    valid[0, 1] = False
    both = _tree_loss(adapter, ro, valid, clip_range=10.0)[0]
    assert padded == pytest.approx(both, rel=1e-6)
    assert abs(padded - full) > 1e-4


def test_the_tree_logged_log_density_is_the_mean_over_valid_edges():
    """policy/logprob on a tree is the mean of log π_θ(child | parent) over the valid edges (row 0's edges,
    marked invalid, are left out)."""
    adapter, ro = _tree((-0.9, 0.9))
    rows, s = ro.extras["tree"], _sampling()
    k = rows.child_mask.shape[1]
    with torch.no_grad():
        v = adapter.transformer(rows.x, rows.sigma, rows.cond)
        mean = kernel_mean_std(
            s.kernel, rows.x, v, rows.sigma, rows.sigma_next, s.noise_level, rows.sigma_next_of_one
        )[0]
    lp = K.gaussian_log_prob(
        rows.children.flatten(0, 1), mean.repeat_interleave(k, 0), rows.std.repeat_interleave(k)
    ).view(-1, k)
    valid = rows.child_mask.clone()
    valid[0] = False
    assert abs(float(lp[0].mean() - lp[valid].mean())) > 1e-3 * abs(float(lp.mean()))
    _, m = _tree_loss(adapter, ro, valid)
    assert m["policy/logprob"] == pytest.approx(float(lp[valid].double().mean()), rel=1e-5)


def test_the_terms_of_a_windowed_rollout_are_its_trained_step_indices():
    """sampling.sde_window 2 of 6 steps: a rollout whose window starts past step 0 trains the steps of its
    window (GRPOObjective.terms are the step indices the loss reads, not their positions 0, 1)."""
    for step in range(20):
        _, s, ro = _setup({"num_steps": 6, "sde_window": 2}, step=step)
        if ro.train_steps[0] > 0:
            break
    assert ro.train_steps[0] > 0 and len(ro.train_steps) == 2
    assert GRPOObjective(ObjectiveConfig(), s).terms(ro) == list(ro.train_steps)

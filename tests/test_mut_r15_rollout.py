"""Rollout behaviour no earlier test pinned down (mutation round 15): the Rollout contract check, the per-process
noise streams, the SDE window's start bound and the strategy dispatch, on a fake flow adapter (no model loads)."""

from __future__ import annotations

import random

import pytest
import torch

from imgalign.trainers.config import SamplingConfig
from imgalign.trainers.rollout import (
    Rollout,
    RolloutContext,
    check_rollout,
    flat_rollout,
    group_initial_noise,
    kernel_mean_std,
    sample_trajectories,
    step_kernel,
    trained_steps,
)
from imgalign.trainers.testing import ClosedFormFlow


def _ctx(step: int = 0, reduce: str = "sum", **over) -> RolloutContext:
    cfg = SamplingConfig(**{"num_steps": 3, "group_size": 2, **over})
    return RolloutContext(ClosedFormFlow(), None, cfg, 0, step, reduce)


def _rollout(n: int, **over) -> Rollout:
    ids = torch.arange(n)
    return flat_rollout(_ctx(**over), ["a"] * n, [{}] * n, ids, ids // 2)


def test_check_rollout_refuses_a_batch_of_another_size_or_shape_and_names_the_strategy():
    """check_rollout takes a Rollout with one [3, H, W] image and one prompt per asked prompt, and returns it; a
    prompt list of another length, images that are not 4-D or fewer images than prompts name sampling.rollout."""
    ro = _rollout(4)
    assert check_rollout("flat", ro, 4) is ro
    with pytest.raises(ValueError, match=r"sampling.rollout 'mine' returned a tuple, not a Rollout"):
        check_rollout("mine", (ro,), 4)
    ro.prompts = ro.prompts[:3]
    shape = r"returned images \(4, 3, 4, 4\) and 3 prompts"
    with pytest.raises(ValueError, match=rf"sampling.rollout 'mine' {shape}"):
        check_rollout("mine", ro, 4)
    ro = _rollout(4)
    ro.images = ro.images[:, 0]  # [4, 4, 4]: no channel dimension
    with pytest.raises(ValueError, match=r"returned images \(4, 4, 4\) and 4 prompts for 4 prompts"):
        check_rollout("mine", ro, 4)
    ro = _rollout(4)
    ro.images = ro.images[:2]
    with pytest.raises(ValueError, match=r"returned images \(2, 3, 4, 4\)"):
        check_rollout("mine", ro, 4)


def test_a_rollouts_rows_are_its_samples_unless_it_names_its_train_rows_and_x0_is_the_last_latent():
    """num_rows: the samples of a flat rollout, a strategy's own train_rows (tree parent rows) when it sets them;
    x0 is the trajectory's final latent, which the images decode."""
    ro = _rollout(4)
    assert ro.num_rows == 4
    ro.train_rows = 7
    assert ro.num_rows == 7
    assert torch.equal(ro.x0, ro.latents[:, -1]) and not torch.equal(ro.x0, ro.latents[:, 0])
    torch.testing.assert_close(ro.images, ClosedFormFlow().decode(ro.x0))


def test_an_unknown_kernel_is_refused_by_the_step_and_the_mean_std():
    """A kernel name other than sde / cps raises naming the valid ones (a typo is not taken as cps)."""
    x = torch.zeros(2, 4, 4, 4)
    sig = torch.linspace(1, 0, 4)
    with pytest.raises(ValueError, match="unknown kernel 'cpss'; valid: sde, cps"):
        step_kernel("cpss", x, x, sig, 1, 0.7, noise=x)
    with pytest.raises(ValueError, match="unknown kernel 'cpss'; valid: sde, cps"):
        kernel_mean_std("cpss", x, x, sig[1].expand(2), sig[2].expand(2), 0.7, sig[1])


def test_sde_window_max_start_zero_starts_every_window_at_step_zero():
    """sampling.sde_window_max_start=0 pins the window to the first steps on every training step (0 is a bound,
    not "unset": -1 is); unset, windows start anywhere in the first half."""
    pinned = SamplingConfig(num_steps=10, sde_window=2, sde_window_max_start=0)
    assert {tuple(trained_steps(pinned, 0, step)) for step in range(30)} == {(0, 1)}
    free = SamplingConfig(num_steps=10, sde_window=2)
    assert len({tuple(trained_steps(free, 0, step)) for step in range(30)}) > 1


def test_a_groups_initial_noise_follows_its_global_group_id_on_any_process():
    """shared_init_noise: the start of group g is the same when another process samples groups 2 and 3 only as
    when one process samples groups 0..3 (seeded by the global group id, not its place in the batch)."""
    ctx = _ctx(shared_init_noise=True)
    whole = group_initial_noise(ctx, torch.tensor([0, 0, 1, 1, 2, 2, 3, 3]))
    part = group_initial_noise(ctx, torch.tensor([2, 2, 3, 3]))
    assert torch.equal(part, whole[4:])


def test_a_trajectory_draws_only_from_its_own_generators_not_the_global_rng():
    """Every sample's noise (start and SDE) comes from its seeded generators: the global torch and Python RNG
    states change nothing, and a sample gives the same trajectory in any batch (split over processes)."""
    ctx = _ctx()
    ids = torch.arange(4)
    torch.manual_seed(1)
    random.seed(1)
    a, lp_a, _ = sample_trajectories(ctx, ClosedFormFlow().encode(["ab"] * 4), ids, [0, 1], ids // 2)
    torch.manual_seed(2)
    random.seed(2)
    b, lp_b, _ = sample_trajectories(ctx, ClosedFormFlow().encode(["ab"] * 4), ids, [0, 1], ids // 2)
    assert torch.equal(a, b) and torch.equal(lp_a, lp_b)
    c, lp_c, _ = sample_trajectories(ctx, ClosedFormFlow().encode(["ab"] * 2), ids[2:], [0, 1], ids[2:] // 2)
    assert torch.equal(c, a[2:]) and torch.equal(lp_c, lp_a[2:])


def test_sample_trajectories_stores_each_log_density_at_its_own_step_reduced_as_the_objective_asks():
    """With only step 1 of 3 trained, lps[:, 1] holds the SDE step's log-density and the Euler steps 0 and 2 hold
    0; objective.logprob_reduce=mean stores the summed density over D = 64 latent elements."""
    ids = torch.arange(2)
    cond = ClosedFormFlow().encode(["ab"] * 2)
    _, lp_sum, _ = sample_trajectories(_ctx(), cond, ids, [1], ids // 2)
    _, lp_mean, _ = sample_trajectories(_ctx(reduce="mean"), cond, ids, [1], ids // 2)
    assert (lp_sum[:, 1] != 0).all() and (lp_sum[:, [0, 2]] == 0).all()
    torch.testing.assert_close(lp_mean, lp_sum / 64)

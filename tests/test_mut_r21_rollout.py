"""Mutation round 21 (stop 58): flat-rollout behaviour on a closed-form flow adapter (no model loads):
antithetic pairs, NFE counts, block noise and the CPS reduction in the sampler, the σ = 1 guard of the step
dispatch, and the shared initial noise across forward batches and training steps."""

from __future__ import annotations

import pytest
import torch

from imgalign.trainers import kernels as K
from imgalign.trainers.config import SamplingConfig
from imgalign.trainers.rollout import Rollout, RolloutContext, flat_rollout, sample_trajectories, step_kernel
from imgalign.trainers.testing import ClosedFormFlow

torch.set_num_threads(1)


def _ctx(step: int = 0, reduce: str = "sum", **over) -> RolloutContext:
    cfg = SamplingConfig(**{"num_steps": 3, "group_size": 2, "sde_window": 0, **over})
    return RolloutContext(ClosedFormFlow(), None, cfg, 0, step, reduce)


def _rollout(n: int, prompt: str = "", step: int = 0, **over) -> Rollout:
    ids = torch.arange(n)
    ctx = _ctx(step, **over)
    return flat_rollout(ctx, [prompt] * n, [{}] * n, ids, ids // ctx.cfg.group_size)


def test_antithetic_pairs_are_exact_mirrors_within_each_group_and_the_odd_one_out_is_not():
    """sampling.antithetic with groups of 3 (ids 0-2, 3-5): pairs (0, 1) and (3, 4) mirror their start and
    every SDE noise, so under an odd velocity field the trajectories are exact negatives with equal
    log-densities; samples 2 and 5 pair with nobody (2 is not 3's partner across the group boundary)."""
    ro = _rollout(6, group_size=3, antithetic=True)
    lat, lp = ro.latents, ro.log_probs
    assert ro.train_steps == [0, 1]
    for a, b in ((0, 1), (3, 4)):
        torch.testing.assert_close(lat[b], -lat[a])
        torch.testing.assert_close(lp[b], lp[a])
    for a, b in ((2, 3), (1, 2), (4, 5)):
        assert not torch.allclose(lat[b, 0], -lat[a, 0])
    assert len({float(lat[i, 0].abs().sum()) for i in (0, 2, 3, 5)}) == 4  # four distinct streams


def test_antithetic_with_a_shared_start_mirrors_only_the_sde_noise():
    """antithetic + shared_init_noise: a group's members all start from the group's noise (unflipped), and the
    pair's first SDE steps land symmetrically about the common step mean."""
    ro = _rollout(4, antithetic=True, shared_init_noise=True)
    lat = ro.latents
    assert torch.equal(lat[0, 0], lat[1, 0]) and not torch.equal(lat[0, 0], lat[2, 0])
    x0, sig, level = lat[:1, 0], ro.sigmas, _ctx().cfg.noise_level
    v = ClosedFormFlow().velocity(x0, sig[0], ClosedFormFlow().encode([""]), 1.0)
    mean, _ = K.flow_sde_mean_std(x0, v, sig[0], sig[1], level, sig[1])
    torch.testing.assert_close((lat[0, 1] + lat[1, 1]) / 2, mean[0])
    assert not torch.allclose(lat[0, 1], mean[0])


def test_the_nfe_of_a_rollout_is_every_sample_times_every_step_times_the_cfg_multiplier_over_all_batches():
    """8 samples in forward batches of 3, 3 steps, CFG (2 evaluations a step): 8·3·2 = 48 transformer
    evaluations; without CFG 24."""
    assert _rollout(8, batch_size=3, guidance_scale=4.5).nfe == 48
    assert _rollout(8, batch_size=3, guidance_scale=1.0).nfe == 24


def test_block_noise_reaches_the_sampler_and_its_stored_log_density_is_the_block_gaussians():
    """sampling.noise_block 2: every SDE step moves off its mean by a block-constant (2×2) displacement, and
    the stored log-density is kernels.flow_sde_step's block-coordinate density of the stored next latent."""
    ro = _rollout(2, "ab", noise_block=2)
    f = ClosedFormFlow()
    cond = f.encode(["ab"] * 2)
    for i in ro.train_steps:
        x, y = ro.latents[:, i], ro.latents[:, i + 1]
        v = f.velocity(x, ro.sigmas[i], cond, 1.0)
        sig, level = ro.sigmas, _ctx().cfg.noise_level
        want = K.flow_sde_step(x, v, sig[i], sig[i + 1], level, sig[1], prev_sample=y, block=2)
        d = y - want.mean
        torch.testing.assert_close(d, K.block_project(d, 2))
        assert float(d.abs().max()) > 1e-3
        torch.testing.assert_close(ro.log_probs[:, i], want.log_prob)


def test_cps_rollouts_store_the_reduction_the_objective_asks_for():
    """kernel cps with objective.logprob_reduce mean: the stored log-density is the summed one over D = 64."""
    ids = torch.arange(2)
    cond = ClosedFormFlow().encode(["ab"] * 2)
    _, lp_sum, _ = sample_trajectories(_ctx(kernel="cps"), cond, ids, [0, 1], ids // 2)
    _, lp_mean, _ = sample_trajectories(_ctx(kernel="cps", reduce="mean"), cond, ids, [0, 1], ids // 2)
    assert (lp_sum[:, :2] != 0).all()
    torch.testing.assert_close(lp_mean, lp_sum / 64)


def test_the_step_from_sigma_one_uses_the_schedules_next_sigma_in_its_noise_scale():
    """step_kernel at i = 0 (σ = 1) is kernels.flow_sde_step with sigma_next_of_one = sigmas[1]: finite std
    and log-density, equal to the kernel's."""
    g = torch.Generator().manual_seed(5)
    x, v, y = (torch.randn(2, 4, 4, 4, generator=g) for _ in range(3))
    sig = torch.tensor([1.0, 0.6, 0.3, 0.0])
    got = step_kernel("sde", x, v, sig, 0, 0.7, prev_sample=y)
    want = K.flow_sde_step(x, v, 1.0, 0.6, 0.7, 0.6, prev_sample=y)
    assert torch.isfinite(got.std).all() and torch.isfinite(got.log_prob).all()
    torch.testing.assert_close(got.std, want.std)
    torch.testing.assert_close(got.log_prob, want.log_prob)


@pytest.mark.parametrize("batch_size", [1, 2, 3])
def test_shared_initial_noise_is_the_groups_in_any_forward_batching(batch_size: int):
    """shared_init_noise: a group's members start from one noise, the same whether the 4 samples are sampled
    in forward batches of 1, 2, 3 or 4 (each batch uses its own rows' group ids)."""
    whole = _rollout(4, shared_init_noise=True, batch_size=4)
    split = _rollout(4, shared_init_noise=True, batch_size=batch_size)
    assert torch.equal(whole.latents[0, 0], whole.latents[1, 0])
    assert not torch.equal(whole.latents[0, 0], whole.latents[2, 0])
    torch.testing.assert_close(split.latents, whole.latents)


def test_shared_initial_noise_changes_every_step_and_is_apart_from_the_per_sample_streams():
    """The group start is drawn anew each training step, and from a stream other than any sample's own (sample
    g's start without shared_init_noise is not group g's start)."""
    s0, s1 = _rollout(4, shared_init_noise=True), _rollout(4, step=1, shared_init_noise=True)
    own = _rollout(4)
    assert not torch.equal(s0.latents[0, 0], s1.latents[0, 0])
    for g in (0, 1):
        assert not torch.equal(s0.latents[2 * g, 0], own.latents[g, 0])

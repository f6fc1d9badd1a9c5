"""Mutation round 25 (stop 62): the GRPO anchor term under block noise, on round 21's closed-form flow model."""

from __future__ import annotations

import pytest
import torch
from test_mut_r21_objectives import _Adapter, _kl, _loss, _setup, _valid_mean

from imgalign.trainers.config import ObjectiveConfig
from imgalign.trainers.nft import NFTConfig
from imgalign.trainers.objectives import GRPOObjective, NFTObjective

torch.set_num_threads(1)


def test_the_anchor_kl_is_the_block_noise_steps_kl_in_the_block_coordinates():
    """sampling.noise_block 2: the anchored untrained step is taken as the block-noise SDE step, so its KL is the
    Gaussian's in the block coordinates (as the trained steps' KL is), not the full-latent KL of a step whose
    complement is deterministic (4 times as many dimensions: 4 times the anchor at the same beta)."""
    adapter, s, ro = _setup(
        {"num_steps": 5, "sde_window": 2, "sde_window_max_start": 0, "noise_block": 2}, step=1
    )
    assert ro.train_steps == [0, 1]
    anchored = GRPOObjective(ObjectiveConfig(anchor_beta=0.2), s)
    plain = GRPOObjective(ObjectiveConfig(), s)
    kl3 = _valid_mean(_kl(adapter, ro, s, 3, "sum"))  # _kl uses s.noise_block
    (a, m), (b, _) = _loss(anchored, adapter, ro, 0, step=1), _loss(plain, adapter, ro, 0, step=1)
    assert m["policy/anchor_kl"] == pytest.approx(kl3, rel=1e-5)
    assert a - b == pytest.approx(2 * 0.2 * kl3, rel=1e-4)


class _GuidedAdapter(_Adapter):
    """The closed-form adapter with a velocity that depends on the CFG scale (v·(1 + 0.1·(scale − 1)))."""

    def velocity(self, x, sigma, cond, scale, transformer=None):  # noqa: ANN001, ANN201
        return transformer(x, sigma, cond) * (1 + 0.1 * (scale - 1))


def _nft(sampling_cfg: float = 1.0, **nft: float) -> tuple[_Adapter, NFTObjective, object]:
    adapter, s, ro = _setup({"num_steps": 3, "guidance_scale": sampling_cfg})
    guided = _GuidedAdapter(adapter.transformer, adapter.ref)
    obj = NFTObjective(ObjectiveConfig(name="nft", nft=NFTConfig(**nft)), s)
    return guided, obj, ro


def test_nft_evaluates_the_old_policy_at_the_cfg_scale_it_trains():
    """objective.nft.guidance_scale 3: v_old is the old policy's velocity at CFG 3 as v_theta is. At the first
    update the old policy is a copy of the weights, so v+ = v- and L+ = L- for every sample; an old velocity at
    another scale made the implicit policies differ before any update (a spurious signal)."""
    adapter, obj, ro = _nft(sampling_cfg=3.0, guidance_scale=3.0)
    _, m = _loss(obj, adapter, ro, 0)
    assert m["nft/loss_plus"] == pytest.approx(m["nft/loss_minus"], rel=1e-6)


def test_nft_logs_the_mean_optimality_probability_of_the_valid_rows_only():
    """nft/r_mean over the valid rows (0, 1, 3: advantages 1, -1, 0.25, clip 1): r = A/2 + 1/2 = 1, 0, 0.625,
    mean 0.541666; the invalid row's r (0.75) left in gave 0.59375."""
    adapter, obj, ro = _nft()
    _, m = _loss(obj, adapter, ro, 0)
    assert m["nft/r_mean"] == pytest.approx((1.0 + 0.0 + 0.625) / 3, rel=1e-6)

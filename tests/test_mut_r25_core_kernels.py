"""Mutation round 25 (stop 62): the sampling kernels with one noise level per sample."""

from __future__ import annotations

import math

import pytest
import torch

from imgalign.trainers import kernels as K


def test_an_sde_step_with_a_noise_level_per_sample_scales_each_samples_noise_by_its_own_std() -> None:
    """sigma [B] (tree rows, per-sample schedules): sample b moves by std_b * noise_b, std_b = a*sqrt(s_b/(1-s_b))
    * sqrt(s_b - s'_b); the first sample's std applied to every row was a wrong step for all the others."""
    x, v, noise = torch.full((2, 1), 2.0), torch.full((2, 1), -1.0), torch.full((2, 1), 1.5)
    sigma, sigma_next = torch.tensor([0.5, 0.8]), torch.tensor([0.25, 0.4])
    out = K.flow_sde_step(x, v, sigma, sigma_next, 0.5, 0.9, noise=noise)
    std = [0.5 * math.sqrt(s / (1 - s)) * math.sqrt(s - sn) for s, sn in ((0.5, 0.25), (0.8, 0.4))]
    assert out.std.tolist() == pytest.approx(std, rel=1e-6)
    assert (out.prev_sample - out.mean).flatten().tolist() == pytest.approx([1.5 * s for s in std], rel=1e-5)
    ref = torch.distributions.Normal(out.mean.flatten(), torch.tensor(std)).log_prob(
        out.prev_sample.flatten()
    )
    assert out.log_prob.tolist() == pytest.approx(ref.tolist(), rel=1e-5)

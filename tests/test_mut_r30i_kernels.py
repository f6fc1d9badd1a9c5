"""Mutation round 30i: ode_step's zero log-prob and zero std are made on the latents' device (a CUDA run's
trajectory stacks them with the SDE steps' log-probs; the meta device stands in for a GPU here)."""

from __future__ import annotations

import torch

from imgalign.trainers import kernels as K


def test_the_ode_steps_zeros_are_on_the_latents_device() -> None:
    x = torch.zeros(2, 3, 4, 4, device="meta")
    out = K.ode_step(x, x, 0.8, 0.6)
    assert {t.device.type for t in (out.prev_sample, out.log_prob, out.mean, out.std)} == {"meta"}
    assert out.log_prob.shape == out.std.shape == (2,)

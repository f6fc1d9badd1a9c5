"""flow_sde_step at noise_level 0 (the Euler ODE step, kernels.py's docstring) gives its zero log-density in the
dtype StepOutput names for every step, float64, like ode_step, whether it samples or evaluates a stored sample."""

from __future__ import annotations

import torch

from imgalign.trainers import kernels as K


def test_a_noise_level_zero_sde_step_gives_float64_zero_log_probs_like_the_ode_step() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 2, 4, 4, generator=g)
    v = torch.randn(3, 2, 4, 4, generator=g)
    ode = K.ode_step(x, v, 0.8, 0.6)
    sampled = K.flow_sde_step(x, v, 0.8, 0.6, noise_level=0.0, sigma_next_of_one=0.95)
    evaluated = K.flow_sde_step(
        x, v, 0.8, 0.6, noise_level=0.0, sigma_next_of_one=0.95, prev_sample=ode.prev_sample
    )
    for out in (sampled, evaluated):
        assert out.log_prob.dtype == ode.log_prob.dtype == torch.float64
        assert out.log_prob.tolist() == [0.0, 0.0, 0.0]
        assert torch.equal(out.prev_sample, ode.prev_sample)

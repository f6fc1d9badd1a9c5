"""Every step kernel gives its log-probability in one dtype (float64, where the reduction accumulates), so a caller
that stacks the log-probs of a trajectory mixing ODE and SDE steps gets one dtype, whatever steps it mixed."""

from __future__ import annotations

import torch

from imgalign.trainers import kernels as K


def test_every_kernel_returns_its_log_prob_and_std_in_one_dtype() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 2, 4, 4, generator=g)
    v = torch.randn(3, 2, 4, 4, generator=g)
    outs = {
        "ode": K.ode_step(x, v, 0.8, 0.6),
        "sde": K.flow_sde_step(
            x,
            v,
            0.8,
            0.6,
            noise_level=0.7,
            sigma_next_of_one=0.95,
            noise=torch.randn(3, 2, 4, 4, generator=g),
        ),
        "cps": K.cps_step(x, v, 0.8, 0.6, noise_level=0.7, noise=torch.randn(3, 2, 4, 4, generator=g)),
    }
    dtypes = {name: out.log_prob.dtype for name, out in outs.items()}
    assert dtypes == {"ode": torch.float64, "sde": torch.float64, "cps": torch.float64}
    assert outs["ode"].log_prob.tolist() == [0.0, 0.0, 0.0]
    assert outs["ode"].std.tolist() == [0.0, 0.0, 0.0]
    assert {out.prev_sample.dtype for out in outs.values()} == {torch.float32}
    assert outs["ode"].std.dtype == outs["sde"].std.dtype

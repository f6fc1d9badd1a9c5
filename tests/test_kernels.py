"""Sampling kernels and GRPO math against independent formulas (torch.distributions, diffusers' Euler scheduler)."""

from __future__ import annotations

import math
import random

import pytest
import torch

from imgalign.trainers import kernels as K
from imgalign.trainers.grpo import group_advantages, grpo_clipped_loss

torch.set_num_threads(1)


class TinyVelocity(torch.nn.Module):
    """A small deterministic velocity field v(x, σ) with parameters, to test ratios under 'unchanged weights'."""

    def __init__(self, d: int = 12) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(d, d, generator=g) * 0.3)
        self.b = torch.nn.Parameter(torch.randn(d, generator=g) * 0.1)

    def forward(self, x: torch.Tensor, sigma: float) -> torch.Tensor:
        flat = x.reshape(x.shape[0], -1)
        return (torch.tanh(flat @ self.w + self.b) * (1 + sigma)).reshape(x.shape)


def schedule(n: int = 6) -> torch.Tensor:
    return torch.linspace(1.0, 0.0, n + 1)


def test_log_prob_equals_torch_normal():
    g = torch.Generator().manual_seed(1)
    x, mu = torch.randn(3, 2, 4, 4, generator=g), torch.randn(3, 2, 4, 4, generator=g)
    std = torch.tensor([0.3, 0.7, 1.5])
    ref = torch.distributions.Normal(mu, std.view(-1, 1, 1, 1)).log_prob(x)
    ref = ref.double()  # the log-density is summed in float64
    torch.testing.assert_close(K.gaussian_log_prob(x, mu, std, "sum"), ref.sum(dim=(1, 2, 3)))
    torch.testing.assert_close(K.gaussian_log_prob(x, mu, std, "mean"), ref.mean(dim=(1, 2, 3)))
    # scalar std broadcasts
    ref2 = torch.distributions.Normal(mu, 0.5).log_prob(x).double().sum(dim=(1, 2, 3))
    torch.testing.assert_close(K.gaussian_log_prob(x, mu, 0.5), ref2)


def test_log_ratio_of_large_latents_is_not_rounded_away():
    """A 1024 px latent (16 x 128 x 128): each summed log-density is about 2e5, where float32 steps are 1/64. The
    PPO log-ratio of a step whose mean moved by 1e-5 must match float64 arithmetic, not move in steps of 1/64
    (measured before the float64 sums: +0.000 and -0.0156 where float64 gives -0.0006 and -0.0081)."""
    from imgalign.trainers.grpo import grpo_clipped_loss

    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 16, 128, 128, generator=g)
    v = torch.randn(x.shape, generator=g)
    out = K.flow_sde_step(x, v, 0.2, 0.1, 0.7, 0.9, noise=torch.randn(x.shape, generator=g))
    v2 = v + 1e-5 * torch.randn(x.shape, generator=g)
    new = K.flow_sde_step(x, v2, 0.2, 0.1, 0.7, 0.9, prev_sample=out.prev_sample)
    m1, sd = K.flow_sde_mean_std(x.double(), v.double(), 0.2, 0.1, 0.7, 0.9)
    m2, _ = K.flow_sde_mean_std(x.double(), v2.double(), 0.2, 0.1, 0.7, 0.9)
    y = out.prev_sample.double()
    exact = (((y - m1) ** 2).sum() - ((y - m2) ** 2).sum()) / (2 * sd.double() ** 2)  # log π_new − log π_old
    sur = grpo_clipped_loss(new.log_prob, out.log_prob, torch.ones(1), 0.2)
    assert abs(float(torch.log(sur.ratio)) - float(exact)) < 1e-4, (float(torch.log(sur.ratio)), float(exact))


def test_mean_reduced_log_ratio_of_large_latents_is_not_rounded_away():
    """reduce="mean" divides the log-density by D = 262,144: its log-ratio (about 2e-9 here) is far below float32's
    resolution of a mean near -1 (6e-8), so the mean must be accumulated in float64 like the sum; D times the
    mean-reduced log-ratio equals the summed one."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 16, 128, 128, generator=g)
    v = torch.randn(x.shape, generator=g)
    out = K.flow_sde_step(x, v, 0.2, 0.1, 0.7, 0.9, noise=torch.randn(x.shape, generator=g))
    v2 = v + 1e-5 * torch.randn(x.shape, generator=g)
    lps = {
        r: K.flow_sde_step(x, v2, 0.2, 0.1, 0.7, 0.9, prev_sample=out.prev_sample, reduce=r).log_prob
        - K.flow_sde_step(x, v, 0.2, 0.1, 0.7, 0.9, prev_sample=out.prev_sample, reduce=r).log_prob
        for r in ("sum", "mean")
    }
    assert abs(float(lps["sum"])) > 1e-4
    assert float(lps["mean"]) * x[0].numel() == pytest.approx(float(lps["sum"]), rel=1e-3)


def test_reduce_dims_refuses_an_unknown_reduction():
    with pytest.raises(ValueError, match="reduce must be 'sum' or 'mean'"):
        K.reduce_dims(torch.zeros(2, 3), "max")  # type: ignore[arg-type]


def test_bfloat16_inputs_are_computed_in_float32():
    """A bf16 model's x, v and μ: the kernels cast to float32 first (bf16 has 8 bits of mantissa, so (x − μ)² and
    the SDE mean computed in bf16 would be off by about 1e-2 relative)."""
    g = torch.Generator().manual_seed(8)
    x, v = torch.randn(2, 3, 4, 4, generator=g).bfloat16(), torch.randn(2, 3, 4, 4, generator=g).bfloat16()
    mean, std = K.flow_sde_mean_std(x, v, 0.6, 0.4, 0.7, 0.9)
    ref_mean, ref_std = K.flow_sde_mean_std(x.float(), v.float(), 0.6, 0.4, 0.7, 0.9)
    assert mean.dtype == torch.float32 and torch.equal(mean, ref_mean) and torch.equal(std, ref_std)
    y = (ref_mean + 0.3 * torch.randn(ref_mean.shape, generator=g)).bfloat16()
    # the exact log-density of the bf16 values
    ref = (
        torch.distributions.Normal(ref_mean.bfloat16().double(), 0.3).log_prob(y.double()).sum(dim=(1, 2, 3))
    )
    torch.testing.assert_close(K.gaussian_log_prob(y, ref_mean.bfloat16(), 0.3), ref, rtol=0, atol=1e-3)


def test_log_prob_of_a_sample_drawn_with_gradients_is_the_score_of_the_stored_sample():
    """Sampling with a velocity that carries gradients: the log-density's gradient is the score function of the
    drawn sample held fixed ((x' − μ)/s² · ∂μ/∂v), as when the stored sample is evaluated, not 0 (which is what
    differentiating through x' = μ + s·ε as well would give)."""
    g = torch.Generator().manual_seed(9)
    x, v0, noise = (torch.randn(2, 1, 2, 2, generator=g) for _ in range(3))
    for kernel in ("sde", "cps"):
        grads = []
        for stored in (False, True):
            v = v0.clone().requires_grad_(True)
            if kernel == "sde":
                out = K.flow_sde_step(x, v, 0.6, 0.4, 0.7, 0.9, noise=noise)
            else:
                out = K.cps_step(x, v, 0.6, 0.4, 0.7, noise=noise)
            if stored:
                y = out.prev_sample.detach()
                v = v0.clone().requires_grad_(True)
                if kernel == "sde":
                    out = K.flow_sde_step(x, v, 0.6, 0.4, 0.7, 0.9, prev_sample=y)
                else:
                    out = K.cps_step(x, v, 0.6, 0.4, 0.7, prev_sample=y)
            (grad,) = torch.autograd.grad(out.log_prob.sum(), v)
            grads.append(grad)
        assert grads[1].abs().max() > 0.1, kernel
        torch.testing.assert_close(grads[0], grads[1], msg=kernel)


def test_sde_mean_and_std_hand_computed():
    # scalar case: x = 2, v = -1, σ = 0.5, σ' = 0.25, a = 0.7 -> ς = 0.7·sqrt(0.5/0.5) = 0.7, dt = -0.25
    x, v = torch.full((1, 1), 2.0), torch.full((1, 1), -1.0)
    mean, std = K.flow_sde_mean_std(x, v, 0.5, 0.25, 0.7, 0.9)
    s = 0.7
    expect = 2.0 + (-1.0) * -0.25 + (s**2 / (2 * 0.5)) * (2.0 + 0.5 * -1.0) * -0.25
    assert mean.item() == pytest.approx(expect, rel=1e-6)
    assert std.item() == pytest.approx(s * math.sqrt(0.25), rel=1e-6)
    # σ = 1 uses the next sigma in the denominator: ς = a·sqrt(1/(1 − 0.9))
    assert K.sde_sigma_scale(1.0, 0.9, 0.7).item() == pytest.approx(0.7 * math.sqrt(10.0), rel=1e-6)


def test_cps_hand_computed():
    x, v = torch.full((1, 1), 2.0), torch.full((1, 1), -1.0)
    mean, std = K.cps_mean_std(x, v, 0.5, 0.25, 0.5)
    sd = 0.25 * math.sin(0.25 * math.pi)
    x0, x1 = 2.0 - 0.5 * -1.0, 2.0 + 0.5 * -1.0
    assert std.item() == pytest.approx(sd, rel=1e-6)
    assert mean.item() == pytest.approx(0.75 * x0 + math.sqrt(0.25**2 - sd**2) * x1, rel=1e-6)
    # a stored sample's log-density is torch's Normal, summed or averaged over the latent dims as asked
    g = torch.Generator().manual_seed(3)
    x, v, y = (torch.randn(2, 3, 2, 2, generator=g) for _ in range(3))
    mean, std = K.cps_mean_std(x, v, 0.5, 0.25, 0.5)
    ref = torch.distributions.Normal(mean, std.view(-1, 1, 1, 1)).log_prob(y).double()
    for reduce, expect in (("sum", ref.sum(dim=(1, 2, 3))), ("mean", ref.mean(dim=(1, 2, 3)))):
        torch.testing.assert_close(
            K.cps_step(x, v, 0.5, 0.25, 0.5, prev_sample=y, reduce=reduce).log_prob, expect
        )
    # the deterministic last step has no score scale
    with pytest.raises(ValueError, match="deterministic"):
        K.velocity_score_scale("cps", 0.25, 0.0, 0.5, 0.9)


def test_cps_step_to_sigma_zero_is_deterministic_with_log_prob_zero():
    """At sigma' = 0 the CPS std is 0: the step lands on x0_hat = x - sigma * v and its log-density is 0 (not the
    -d * log sqrt(2 pi) a unit-std Gaussian at its mean would give); a stored sample evaluates the same."""
    x, v = torch.full((2, 1, 2, 2), 2.0), torch.full((2, 1, 2, 2), -1.0)
    out = K.cps_step(x, v, 0.25, 0.0, 0.7)
    torch.testing.assert_close(out.prev_sample, torch.full_like(x, 2.25))
    assert out.std.tolist() == [0.0, 0.0] and out.log_prob.tolist() == [0.0, 0.0]
    again = K.cps_step(x, v, 0.25, 0.0, 0.7, prev_sample=out.prev_sample, reduce="mean")
    assert again.log_prob.tolist() == [0.0, 0.0]


def test_cps_step_without_noise_is_refused_when_any_sample_is_stochastic():
    """Per-sample σ' (tree rollouts): one sample stepping to σ' = 0.5 has std > 0, so sampling without `noise` is
    refused even though the other sample's step (σ' = 0) is deterministic."""
    x, v = torch.full((2, 1, 2, 2), 2.0), torch.full((2, 1, 2, 2), -1.0)
    with pytest.raises(ValueError, match="pass `noise`"):
        K.cps_step(x, v, torch.tensor([0.75, 0.25]), torch.tensor([0.5, 0.0]), 0.7)


def test_cps_last_step_log_prob_has_a_zero_gradient_not_nan():
    """At sigma' = 0 the CPS log-density is the constant 0, and so is its gradient: the std-0 Gaussian is never
    evaluated (with std 0 in it, torch.where would pass NaN = 0/0 back through the masked branch)."""
    x = torch.full((2, 1, 2, 2), 2.0)
    v = torch.full((2, 1, 2, 2), -1.0, requires_grad=True)
    stored = torch.full_like(x, 2.25)
    out = K.cps_step(x, v, 0.25, 0.0, 0.7, prev_sample=stored)
    out.log_prob.sum().backward()
    assert out.log_prob.tolist() == [0.0, 0.0]
    assert v.grad is not None and v.grad.abs().max().item() == 0.0


@pytest.mark.parametrize("kernel", ["sde", "cps"])
def test_a_sampled_step_is_the_mean_plus_std_times_the_noise(kernel: str):
    """x' = mu + std * noise, hand-computed on one element (x = 2, v = -1, sigma 0.5 -> 0.25, a = 0.5, noise 1.5),
    and its log-density is torch's Normal(mu, std) at x'."""
    x, v, noise = torch.full((1, 1), 2.0), torch.full((1, 1), -1.0), torch.full((1, 1), 1.5)
    if kernel == "sde":  # sigma_next_of_one unused below sigma = 1: scale = 0.5 * sqrt(0.5 / 0.5), dt = -0.25
        s, dt = 0.5, -0.25
        mu, sd = 2.0 + 0.25 + (s**2 / 1.0) * (2.0 - 0.5) * dt, s * math.sqrt(0.25)
        out = K.flow_sde_step(x, v, 0.5, 0.25, 0.5, 0.9, noise=noise)
    else:  # std = 0.25 sin(pi/4), x0_hat = 2.5, x1_hat = 1.5
        sd = 0.25 * math.sin(0.25 * math.pi)
        mu = 0.75 * 2.5 + math.sqrt(0.25**2 - sd**2) * 1.5
        out = K.cps_step(x, v, 0.5, 0.25, 0.5, noise=noise)
    assert out.mean.item() == pytest.approx(mu, rel=1e-6) and out.std.item() == pytest.approx(sd, rel=1e-6)
    assert out.prev_sample.item() == pytest.approx(mu + 1.5 * sd, rel=1e-6)
    ref = torch.distributions.Normal(torch.tensor(mu), torch.tensor(sd)).log_prob(torch.tensor(mu + 1.5 * sd))
    assert out.log_prob.item() == pytest.approx(ref.item(), rel=1e-5)


def test_ode_step_hand_computed_mean_is_the_step():
    """x' = x + v (sigma' - sigma): x = 2, v = -1, sigma 0.5 -> 0.25 gives 2.25; a deterministic step's mean is x'
    itself, its std and log-density 0."""
    out = K.ode_step(torch.full((2, 1, 1, 1), 2.0), torch.full((2, 1, 1, 1), -1.0), 0.5, 0.25)
    assert out.prev_sample.flatten().tolist() == [2.25, 2.25] and torch.equal(out.mean, out.prev_sample)
    assert out.std.tolist() == [0.0, 0.0] and out.log_prob.tolist() == [0.0, 0.0]


@pytest.mark.parametrize("kernel", ["sde", "cps"])
@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_ratio_is_one_on_policy(kernel: str, reduce: str):
    """Roll out with the model, store transitions, re-evaluate with unchanged weights: ratio == 1 exactly."""
    model = TinyVelocity()
    sig = schedule()
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 3, 2, 2, generator=g)
    stored = []
    with torch.no_grad():
        for i in range(len(sig) - 2):
            v = model(x, float(sig[i]))
            noise = torch.randn(x.shape, generator=g)
            if kernel == "sde":
                out = K.flow_sde_step(x, v, sig[i], sig[i + 1], 0.7, sig[1], noise=noise, reduce=reduce)
            else:
                out = K.cps_step(x, v, sig[i], sig[i + 1], 0.7, noise=noise, reduce=reduce)
            stored.append((x.clone(), out.prev_sample.clone(), out.log_prob.clone(), i))
            x = out.prev_sample
    for x_t, x_next, old_lp, i in stored:
        v = model(x_t, float(sig[i]))  # with grad, as in training
        if kernel == "sde":
            new = K.flow_sde_step(x_t, v, sig[i], sig[i + 1], 0.7, sig[1], prev_sample=x_next, reduce=reduce)
        else:
            new = K.cps_step(x_t, v, sig[i], sig[i + 1], 0.7, prev_sample=x_next, reduce=reduce)
        assert torch.isfinite(new.log_prob).all()
        ratio = torch.exp(new.log_prob - old_lp)
        torch.testing.assert_close(ratio, torch.ones_like(ratio), rtol=0, atol=1e-5)
        new.log_prob.sum().backward()  # differentiable through the mean
        assert model.w.grad is not None and torch.isfinite(model.w.grad).all()


def test_noise_level_zero_is_euler_ode_exactly():
    model = TinyVelocity()
    sig = schedule(8)
    x0 = torch.randn(2, 3, 2, 2, generator=torch.Generator().manual_seed(5))
    a, b = x0.clone(), x0.clone()
    with torch.no_grad():
        for i in range(len(sig) - 1):
            a = K.flow_sde_step(a, model(a, float(sig[i])), sig[i], sig[i + 1], 0.0, sig[1]).prev_sample
            b = K.ode_step(b, model(b, float(sig[i])), sig[i], sig[i + 1]).prev_sample
    assert torch.equal(a, b)
    # evaluating a stored sample at noise level 0: a deterministic step, log-density 0 (not log 0)
    out = K.flow_sde_step(a, model(a, 0.5), 0.5, 0.25, 0.0, sig[1], prev_sample=b)
    assert out.log_prob.tolist() == [0.0, 0.0]


def test_ode_step_matches_diffusers_euler_scheduler():
    from diffusers import FlowMatchEulerDiscreteScheduler

    sched = FlowMatchEulerDiscreteScheduler(shift=3.0)
    sched.set_timesteps(5)
    model = TinyVelocity()
    x = torch.randn(2, 3, 2, 2, generator=torch.Generator().manual_seed(7))
    y = x.clone()
    with torch.no_grad():
        for i, t in enumerate(sched.timesteps):
            s, s_next = sched.sigmas[i], sched.sigmas[i + 1]
            v = model(x, float(s))
            x = sched.step(v, t, x).prev_sample
            y = K.ode_step(y, model(y, float(s)), s, s_next).prev_sample
    torch.testing.assert_close(x, y, rtol=0, atol=1e-6)


def test_kl_closed_form_zero_at_init_and_matches_torch():
    g = torch.Generator().manual_seed(2)
    mu = torch.randn(3, 2, 3, 3, generator=g)
    std = torch.tensor([0.2, 0.5, 1.0])
    assert torch.equal(K.gaussian_kl_equal_std(mu, mu.clone(), std), torch.zeros(3))
    mu2 = mu + 0.3 * torch.randn(mu.shape, generator=g)
    s = std.view(-1, 1, 1, 1).expand_as(mu)
    ref = torch.distributions.kl_divergence(
        torch.distributions.Normal(mu2, s), torch.distributions.Normal(mu, s)
    )
    torch.testing.assert_close(K.gaussian_kl_equal_std(mu2, mu, std), ref.sum(dim=(1, 2, 3)))
    # reduced like the log-density: the mean over the latent dims with reduce="mean"
    torch.testing.assert_close(K.gaussian_kl_equal_std(mu2, mu, std, "mean"), ref.mean(dim=(1, 2, 3)))
    # the step KL uses the step's actual variance ς²|dt|: check via the SDE kernel's own std
    x, v1, v2 = torch.randn(1, 4), torch.randn(1, 4), torch.randn(1, 4)
    m1, sd = K.flow_sde_mean_std(x, v1, 0.6, 0.4, 0.7, 0.9)
    m2, _ = K.flow_sde_mean_std(x, v2, 0.6, 0.4, 0.7, 0.9)
    var = (0.7**2 * 0.6 / 0.4) * 0.2
    expect = ((m1 - m2) ** 2).sum() / (2 * var)
    torch.testing.assert_close(K.gaussian_kl_equal_std(m1, m2, sd), expect.reshape(1))


def test_kl_gradient_flows_to_the_policy_mean_only():
    """d KL / d mu_p = (mu_p - mu_q) / s^2 elementwise (the KL penalty's pull towards the reference), summed form;
    the reference mean gets none when detached by the caller, but the policy mean must not be detached here."""
    g = torch.Generator().manual_seed(4)
    mu_q = torch.randn(2, 1, 2, 2, generator=g)
    mu_p = (mu_q + 0.5 * torch.randn(mu_q.shape, generator=g)).requires_grad_(True)
    std = torch.tensor([0.5, 2.0])
    K.gaussian_kl_equal_std(mu_p, mu_q, std).sum().backward()
    assert mu_p.grad is not None
    torch.testing.assert_close(mu_p.grad, (mu_p - mu_q).detach() / std.view(-1, 1, 1, 1) ** 2)


def test_block_projection_is_orthogonal_and_coords_match_hand_computed():
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(2, 3, 4, 6, generator=g), torch.randn(2, 3, 4, 6, generator=g)
    p = K.block_project(x, 2)
    torch.testing.assert_close(K.block_project(p, 2), p)  # idempotent
    torch.testing.assert_close((p * y).sum(), (x * K.block_project(y, 2)).sum())  # symmetric
    # Uᵀx: a 2x2 block's sum / 2; |Uᵀx| = |Px|
    c = K.block_coords(x, 2)
    assert c.shape == (2, 3, 2, 3)
    assert c[0, 0, 0, 0].item() == pytest.approx(float(x[0, 0, :2, :2].sum()) / 2, rel=1e-5)
    torch.testing.assert_close(c.pow(2).sum(), p.pow(2).sum())
    assert K.block_coords(x, 1) is x and K.block_project(x, 1) is x
    with pytest.raises(ValueError, match="noise_block=4"):
        K.block_project(x, 4)  # 6 is not divisible by 4
    with pytest.raises(ValueError, match="noise_block=4"):
        K.block_coords(x.transpose(2, 3), 4)  # H = 6 is not divisible by 4 (W = 4 is)
    with pytest.raises(ValueError, match="packed latents"):
        K.block_coords(torch.zeros(2, 16, 64), 2)  # FLUX-style packed [B, L, C]: no H x W grid to block


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_block_noise_log_prob_is_the_subspace_normal_and_ratio_one(reduce: str):
    """Block noise: x' − μ lies in the block subspace, its log-density is torch's Normal on the block coordinates
    (C·H·W/b² dimensions), and re-evaluating with unchanged weights gives ratio 1."""
    model = TinyVelocity(d=32)
    sig = schedule()
    g = torch.Generator().manual_seed(6)
    x = torch.randn(3, 2, 4, 4, generator=g)
    with torch.no_grad():
        v = model(x, float(sig[1]))
        out = K.flow_sde_step(
            x, v, sig[1], sig[2], 0.7, sig[1], noise=torch.randn(x.shape, generator=g), reduce=reduce, block=2
        )
    r = out.prev_sample - out.mean
    torch.testing.assert_close(K.block_project(r, 2), r)  # noise only in the subspace
    z = K.block_coords(r, 2)  # [3, 2, 2, 2]
    ref = torch.distributions.Normal(0.0, out.std.view(-1, 1, 1, 1)).log_prob(z)
    ref = ref.double()
    expect = ref.sum(dim=(1, 2, 3)) if reduce == "sum" else ref.mean(dim=(1, 2, 3))
    torch.testing.assert_close(out.log_prob, expect)
    new = K.flow_sde_step(
        x,
        model(x, float(sig[1])),
        sig[1],
        sig[2],
        0.7,
        sig[1],
        prev_sample=out.prev_sample,
        reduce=reduce,
        block=2,
    )
    ratio = torch.exp(new.log_prob - out.log_prob)
    torch.testing.assert_close(ratio, torch.ones(3, dtype=ratio.dtype), rtol=0, atol=1e-5)
    # the KL in block coordinates: ‖Uᵀ(μ_p − μ_q)‖²/(2s²)
    m2 = out.mean + 0.1 * torch.randn(out.mean.shape, generator=g)
    kl = K.gaussian_kl_equal_std(m2, out.mean, out.std, "sum", block=2)
    d = K.block_coords(m2 - out.mean, 2).pow(2).sum(dim=(1, 2, 3)) / (2 * out.std**2)
    torch.testing.assert_close(kl, d)


@pytest.mark.parametrize("block", [1, 2])
def test_block_noise_sde_keeps_the_marginals(block: int):
    """Gaussian data x0 ~ N(0, s²I) has the exact velocity v(x, σ) = (σ − (1 − σ)s²)/τ²·x, τ² = (1 − σ)²s² + σ².
    The SDE with noise in the block subspace and the projected score correction ends at N(0, s²I): the block-
    constant part (2x2 blocks) holds 1/4 of the variance and its complement 3/4. Without projecting the correction
    the complement would be over-denoised (variance about 0.004 instead of 0.1875, measured)."""
    s2 = 0.25
    n = 200
    sig = torch.linspace(1, 0, n + 1)
    x = torch.randn(4000, 2, 4, 4, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)
    for i in range(n):
        s = float(sig[i])
        v = (s - (1 - s) * s2) / ((1 - s) ** 2 * s2 + s**2) * x
        if i == n - 1:
            x = K.ode_step(x, v, sig[i], sig[i + 1]).prev_sample
        else:
            noise = torch.randn(x.shape, generator=g)
            x = K.flow_sde_step(x, v, sig[i], sig[i + 1], 0.7, sig[1], noise=noise, block=block).prev_sample
    p = K.block_project(x, 2)
    assert float(p.var()) == pytest.approx(s2 / 4, rel=0.06)  # the block-constant part: 1/4 of the variance
    assert float((x - p).var()) == pytest.approx(s2 * 3 / 4, rel=0.06)


def test_sde_window():
    rng = random.Random(0)
    assert K.sde_window(10, None, rng) == list(range(9))
    starts = set()
    for _ in range(100):
        w = K.sde_window(10, 2, rng)
        assert len(w) == 2 and w[1] == w[0] + 1
        starts.add(w[0])
    assert starts == {
        0,
        1,
        2,
        3,
        4,
    }  # a start in the first half: steps 0-4 of 0-9 (5 is the second half's first)
    with pytest.raises(ValueError):
        K.sde_window(1, None, rng)
    with pytest.raises(ValueError, match="window_size must be at least 1"):
        K.sde_window(10, 0, rng)  # an empty window would train nothing


def test_sde_window_starts_of_short_schedules_hand_counted():
    """num_steps // 2 - 1 is the last start in the first half: 3 steps (trainable 0-1) start at 0 only, 4 steps
    (trainable 0-2) at 0 or 1, 5 steps at 0 or 1 (a window of 2 fits either)."""
    rng = random.Random(0)
    for num_steps, size, starts in ((3, 1, {0}), (4, 1, {0, 1}), (5, 2, {0, 1})):
        assert {K.sde_window(num_steps, size, rng)[0] for _ in range(60)} == starts, num_steps


def test_sde_window_max_start_zero_is_the_first_steps():
    rng = random.Random(0)
    assert all(K.sde_window(10, 4, rng, max_start=0) == [0, 1, 2, 3] for _ in range(20))
    assert {K.sde_window(10, 2, rng, max_start=1)[0] for _ in range(50)} == {0, 1}


def test_a_wide_sde_window_never_reaches_the_last_step():
    """10 steps, a window of 6: the window must end by step 8 (the last step, 9, has sigma' = 0), so it starts at
    0-3, before the first-half bound 4 or any larger max_start."""
    rng = random.Random(0)
    for max_start in (None, 8):
        windows = [K.sde_window(10, 6, rng, max_start=max_start) for _ in range(200)]
        assert {w[0] for w in windows} == {0, 1, 2, 3}, max_start
        assert all(w == list(range(w[0], w[0] + 6)) for w in windows)


def test_velocity_score_scale_hand_computed_and_by_autograd():
    # SDE, σ = 0.5, σ' = 0.25, a = 0.7: ς = 0.7, dt = −0.25, ∂μ/∂v = 0.25·(1 + 0.49·0.5/(2·0.5)) = 0.31125,
    # std = 0.7·0.5 = 0.35 -> 0.889286
    assert K.velocity_score_scale("sde", 0.5, 0.25, 0.7, 0.9) == pytest.approx(0.31125 / 0.35, rel=1e-6)
    # both kernels: |∂μ/∂v| by autograd through the kernels' own mean, divided by their std
    for kernel, fn in (
        ("sde", lambda x, v, s, sn: K.flow_sde_mean_std(x, v, s, sn, 0.7, 0.9)),
        ("cps", lambda x, v, s, sn: K.cps_mean_std(x, v, s, sn, 0.7)),
    ):
        for s, sn in ((1.0, 0.9), (0.6, 0.45), (0.2, 0.1)):
            x = torch.full((1, 1), 0.3)
            v = torch.full((1, 1), -0.8, requires_grad=True)
            mean, std = fn(x, v, s, sn)
            (dmu_dv,) = torch.autograd.grad(mean.sum(), v)
            got = K.velocity_score_scale(kernel, s, sn, 0.7, 0.9)
            assert got == pytest.approx(abs(dmu_dv.item()) / std.item(), rel=1e-5), (kernel, s)


def test_velocity_step_weights_mean_one_and_favour_high_noise():
    sig = schedule(10).tolist()
    steps = list(range(9))
    w = K.velocity_step_weights("sde", sig, steps, 0.7)
    assert sorted(w) == steps
    assert sum(w.values()) / len(w) == pytest.approx(1.0)
    assert all(w[i] > w[i + 1] for i in steps[:-1])  # the score grows as σ falls, so the weight falls
    inv = [1 / K.velocity_score_scale("sde", sig[i], sig[i + 1], 0.7, sig[1]) for i in steps]
    assert w[0] / w[8] == pytest.approx(inv[0] / inv[8])


def test_group_advantages_hand_computed():
    r = torch.tensor([1.0, 3.0, 2.0, 2.0, 0.0, 4.0])
    gid = torch.tensor([0, 0, 1, 1, 2, 2])
    out = group_advantages(r, gid, "group", clip=None, eps=0.0)
    torch.testing.assert_close(out.advantages, torch.tensor([-1.0, 1.0, 0.0, 0.0, -1.0, 1.0]))
    assert out.valid.tolist() == [True, True, False, False, True, True]
    assert out.zero_std_ratio == pytest.approx(1 / 3)
    # batch std: std over every finite reward
    out = group_advantages(r, gid, "batch", clip=None, eps=0.0)
    bstd = r.std(unbiased=False)
    torch.testing.assert_close(out.advantages, torch.tensor([-1.0, 1.0, 0.0, 0.0, -2.0, 2.0]) / bstd)
    # clipping
    out = group_advantages(
        torch.tensor([0.0, 0.0, 0.0, 100.0]), torch.zeros(4, dtype=torch.long), "batch", clip=1.0
    )
    assert out.advantages.abs().max() == pytest.approx(1.0)
    # non-finite rewards are excluded from statistics and get zero advantage
    out = group_advantages(
        torch.tensor([1.0, float("nan"), 3.0]), torch.zeros(3, dtype=torch.long), clip=None, eps=0
    )
    torch.testing.assert_close(out.advantages, torch.tensor([-1.0, 0.0, 1.0]))
    assert out.valid.tolist() == [True, False, True]


def test_group_advantages_centre_on_each_groups_own_mean_and_add_eps_to_the_std():
    """Groups with different means (the hand-computed test above has equal ones): each is centred on its own mean
    and scaled by its own std; eps is added to the std (group and batch), not dropped."""
    r = torch.tensor([1.0, 3.0, 10.0, 14.0])
    gid = torch.tensor([0, 0, 1, 1])
    out = group_advantages(r, gid, "group", clip=None, eps=0.0)
    torch.testing.assert_close(out.advantages, torch.tensor([-1.0, 1.0, -1.0, 1.0]))
    out = group_advantages(r, gid, "batch", clip=None, eps=0.0)
    torch.testing.assert_close(out.advantages, torch.tensor([-1.0, 1.0, -2.0, 2.0]) / r.std(unbiased=False))
    # std 5e-4 per group: A = ±5e-4 / (5e-4 + 1e-4) with the default eps
    small = torch.tensor([0.0, 1e-3], dtype=torch.float64).float()
    for mode in ("group", "batch"):
        out = group_advantages(small, torch.zeros(2, dtype=torch.long), mode, clip=None)
        torch.testing.assert_close(out.advantages, torch.tensor([-1.0, 1.0]) * 5e-4 / 6e-4, rtol=1e-4, atol=0)
    # the clip is two-sided
    out = group_advantages(
        torch.tensor([0.0, 100.0, 100.0, 100.0]), torch.zeros(4, dtype=torch.long), clip=1.0
    )
    assert out.advantages.min() == pytest.approx(-1.0)
    # batch std: a non-finite reward is in no statistic (not a 0 in the batch std)
    out = group_advantages(
        torch.tensor([1.0, 3.0, float("inf"), 2.0, 6.0]), torch.tensor([0, 0, 0, 1, 1]), "batch", None, 0.0
    )
    bstd = torch.tensor([1.0, 3.0, 2.0, 6.0]).std(unbiased=False)
    torch.testing.assert_close(out.advantages, torch.tensor([-1.0, 1.0, 0.0, -2.0, 2.0]) / bstd)
    # a caller's `finite` mask that misses a NaN reward: the NaN is still left out
    r = torch.tensor([1.0, float("nan"), 3.0])
    out = group_advantages(
        r, torch.zeros(3, dtype=torch.long), clip=None, eps=0, finite=torch.ones(3, dtype=torch.bool)
    )
    torch.testing.assert_close(out.advantages, torch.tensor([-1.0, 0.0, 1.0]))


def test_group_advantages_treat_rewards_within_tie_tol_as_tied_and_clip_zero_as_no_clip():
    """Rewards that differ only by float rounding (std 5e-8 <= tie_tol 1e-6) are a tie, not a ±0.9 signal made of
    noise; clip=0 means no clip (as in objective.adv_clip), not clamping every advantage to 0."""
    out = group_advantages(torch.tensor([0.3, 0.3 + 1e-7]), torch.zeros(2, dtype=torch.long), eps=0.0)
    assert out.valid.tolist() == [False, False] and out.zero_std_ratio == 1.0
    assert out.advantages.tolist() == [0.0, 0.0]
    out = group_advantages(
        torch.tensor([0.0, 0.0, 0.0, 100.0]), torch.zeros(4, dtype=torch.long), clip=0.0, eps=0
    )
    torch.testing.assert_close(out.advantages, torch.tensor([-1.0, -1.0, -1.0, 3.0]) / math.sqrt(3))


def test_group_advantages_default_clip_is_five_and_an_unknown_std_mode_is_refused():
    """The default clip is ±5 (algorithms.md §2), and a misspelt std_mode raises rather than leaving the
    advantages unscaled; a group whose rewards are all non-finite is dropped and counted in zero_std_ratio."""
    r = torch.tensor([0.0] * 99 + [1.0])  # A of the outlier = 0.99 / (0.0995 + 1e-4) ≈ 9.94 before the clip
    out = group_advantages(r, torch.zeros(100, dtype=torch.long))
    assert out.advantages.max().item() == pytest.approx(5.0)
    with pytest.raises(ValueError, match="std_mode"):
        group_advantages(torch.tensor([1.0, 3.0]), torch.zeros(2, dtype=torch.long), "global")  # type: ignore[arg-type]
    nan = float("nan")
    out = group_advantages(torch.tensor([1.0, 3.0, nan, nan]), torch.tensor([0, 0, 1, 1]), clip=None, eps=0.0)
    assert out.valid.tolist() == [True, True, False, False] and out.zero_std_ratio == pytest.approx(0.5)
    torch.testing.assert_close(out.advantages, torch.tensor([-1.0, 1.0, 0.0, 0.0]))


def test_grpo_loss_hand_computed():
    lp_old = torch.zeros(4)
    lp = torch.log(torch.tensor([1.0, 1.5, 0.5, 1.1]))
    adv = torch.tensor([1.0, 1.0, -1.0, -2.0])
    out = grpo_clipped_loss(lp, lp_old, adv, clip_range=0.2)
    # per sample: max(-A·ρ, -A·clip(ρ)):  [-1, max(-1.5,-1.2)=-1.2, max(0.5,0.8)=0.8, max(2.2, 2.2)=2.2]
    assert out.loss.item() == pytest.approx((-1 - 1.2 + 0.8 + 2.2) / 4, rel=1e-6)
    assert out.clipfrac.item() == pytest.approx(0.5)
    # on-policy: gradient = -mean(A·∇logπ)
    lp2 = torch.zeros(3, requires_grad=True)
    out = grpo_clipped_loss(lp2, torch.zeros(3), torch.tensor([1.0, -2.0, 0.5]), 0.2)
    out.loss.backward()
    torch.testing.assert_close(lp2.grad, torch.tensor([-1.0, 2.0, -0.5]) / 3)


def test_grpo_approx_kl_is_the_weighted_mean_over_unmasked_samples():
    """approx_kl = Σ w·½(logπ_θ − logπ_old)² / Σ w: masked samples (weight 0) are left out, also when their
    log-ratio is NaN (a diverged sample)."""
    lp_old = torch.zeros(5)
    lp = torch.tensor([0.2, -0.4, 3.0, float("nan"), 0.1])
    w = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0])
    out = grpo_clipped_loss(lp, lp_old, torch.ones(5), 0.2, w)
    assert out.approx_kl.item() == pytest.approx(0.5 * (0.04 + 0.16 + 0.01) / 3, rel=1e-6)
    # without weights: the plain mean over every sample
    out = grpo_clipped_loss(lp[:3], lp_old[:3], torch.ones(3), 0.2)
    assert out.approx_kl.item() == pytest.approx(0.5 * (0.04 + 0.16 + 9.0) / 3, rel=1e-6)


def test_grpo_loss_and_clipfrac_are_weighted_means_that_skip_a_masked_nan():
    """With weights: the loss and clipfrac are means over the unmasked samples; a masked sample is left out even
    when it would be clipped, and a NaN log-density there does not reach the loss."""
    lp_old = torch.zeros(5)
    lp = torch.log(torch.tensor([1.5, 1.0, 3.0, float("nan"), 0.5]))
    adv = torch.tensor([1.0, 1.0, 1.0, 1.0, -1.0])
    w = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0])
    out = grpo_clipped_loss(lp, lp_old, adv, 0.2, w)
    # unmasked: max(-1.5, -1.2) = -1.2, -1, max(0.5, 0.8) = 0.8; samples 0 and 4 clipped
    assert out.loss.item() == pytest.approx((-1.2 - 1.0 + 0.8) / 3, rel=1e-6)
    assert out.clipfrac.item() == pytest.approx(2 / 3, rel=1e-6)
    # every sample masked (a micro-batch of invalid samples): a zero loss with zero gradient, not 0/0
    lp = torch.zeros(2, requires_grad=True)
    out = grpo_clipped_loss(lp, torch.zeros(2), torch.ones(2), 0.2, torch.zeros(2))
    assert out.loss.item() == 0.0 and out.clipfrac.item() == 0.0 and out.approx_kl.item() == 0.0
    out.loss.backward()
    assert lp.grad.tolist() == [0.0, 0.0]


def test_balancers_single_reward_equals_grpo_and_gdpo_matches_math_module():
    from imgalign.trainers.balance import gdpo_advantages
    from imgalign.trainers.rewarding import gdpo, group_norm_weighted

    g = torch.Generator().manual_seed(0)
    r = torch.rand(2, 8, generator=g)
    gid = torch.arange(8) // 4
    finite = torch.ones_like(r, dtype=torch.bool)
    one = group_norm_weighted(r[:1], torch.ones(1), gid, finite[:1])
    torch.testing.assert_close(one.advantages, group_advantages(r[0], gid).advantages)
    both = gdpo(r, torch.tensor([1.0, 0.5]), gid, finite)
    torch.testing.assert_close(both.advantages, gdpo_advantages(r.T, gid, [1.0, 0.5]))
    # a NaN reward masks its sample out of both balancers
    r[1, 3] = float("nan")
    fin = torch.isfinite(r)
    assert not group_norm_weighted(r, torch.ones(2), gid, fin).valid[3]
    out = gdpo(r, torch.ones(2), gid, fin)
    assert not out.valid[3] and out.advantages[3] == 0 and torch.isfinite(out.advantages).all()


def test_gdpo_drops_tied_groups_like_the_other_balancers():
    """A group in which every reward ties carries no signal: GDPO drops it (not valid) as weighted_sum does, and it
    stays out of the batch statistics, so the other groups' advantages are those of GDPO on them alone."""
    from imgalign.trainers.balance import gdpo_advantages
    from imgalign.trainers.rewarding import gdpo, weighted_sum

    g = torch.Generator().manual_seed(1)
    r = torch.rand(2, 12, generator=g)
    r[:, 8:] = torch.tensor([[0.3], [0.7]])  # group 2: both rewards tie
    gid = torch.arange(12) // 4
    fin = torch.ones_like(r, dtype=torch.bool)
    out = gdpo(r, torch.ones(2), gid, fin)
    assert out.valid.tolist() == [True] * 8 + [False] * 4
    assert out.zero_std_ratio == pytest.approx(1 / 3)
    assert out.valid.tolist() == weighted_sum(r, torch.ones(2), gid, fin).valid.tolist()
    torch.testing.assert_close(out.advantages[:8], gdpo_advantages(r[:, :8].T, gid[:8], [1.0, 1.0]))
    assert (out.advantages[8:] == 0).all()
    # one reward varying is signal: the group stays
    r[0, 8] = 0.9
    assert gdpo(r, torch.ones(2), gid, fin).valid.all()


def test_off_policy_warning_threshold_and_hint():
    from imgalign.trainers.grpo import OFF_POLICY_KL, off_policy_warning

    assert off_policy_warning(0.06, 5e-5, 20) is None
    assert off_policy_warning(OFF_POLICY_KL, 1e-4, 0) is None  # at the threshold: quiet
    assert off_policy_warning(float("nan"), 1e-4, 0) is None  # non-finite values are the NaN guard's business
    msg = off_policy_warning(77.0, 1e-4, 0)
    assert msg is not None and "77" in msg and "train.warmup_steps" in msg and "lr 0.0001" in msg
    msg = off_policy_warning(3.0, 1e-4, 20)
    assert msg is not None and "lower train.lr" in msg and "warmup_steps (e.g." not in msg


def test_group_advantages_tie_tol_zero_still_drops_an_exact_tie():
    """A group is tied when its std is at most tie_tol (≤, not <): tie_tol = 0 keeps every varying group but still
    drops one whose rewards are exactly equal (std 0), which would otherwise count as a valid group of zeros."""
    out = group_advantages(
        torch.tensor([2.0, 2.0, 1.0, 3.0]), torch.tensor([0, 0, 1, 1]), tie_tol=0.0, eps=0.0
    )
    assert out.valid.tolist() == [False, False, True, True]
    assert out.zero_std_ratio == pytest.approx(0.5)
    torch.testing.assert_close(out.advantages, torch.tensor([0.0, 0.0, -1.0, 1.0]))


def test_grpo_loss_of_one_unmasked_sample_is_that_samples_surrogate():
    """The weighted mean divides by Σw (at least 1): a micro-batch with one valid sample gets that sample's whole
    surrogate −A·ρ, not a fraction of it; clipfrac and approx_kl are that sample's too."""
    lp = torch.log(torch.tensor([1.1, 3.0]))
    out = grpo_clipped_loss(lp, torch.zeros(2), torch.tensor([2.0, 1.0]), 0.2, torch.tensor([1.0, 0.0]))
    assert out.loss.item() == pytest.approx(-2.0 * 1.1, rel=1e-6)
    assert out.clipfrac.item() == 0.0
    assert out.approx_kl.item() == pytest.approx(0.5 * math.log(1.1) ** 2, rel=1e-5)


def test_grpo_clipfrac_does_not_count_a_ratio_exactly_on_the_clip_boundary():
    """clipfrac counts |ρ − 1| > ε strictly: at ρ = 1 + ε exactly the clipped and unclipped branches are equal, so
    the clip is not active there."""
    diff = torch.tensor([0.25, -0.25])
    ratio = torch.exp(diff)
    # float32 ratios in [0.5, 2]: both differences from 1 are exact
    eps_hi, eps_lo = float(ratio[0]) - 1.0, 1.0 - float(ratio[1])
    for eps, row in ((eps_hi, 0), (eps_lo, 1)):
        out = grpo_clipped_loss(diff[row : row + 1], torch.zeros(1), torch.ones(1), eps)
        assert out.clipfrac.item() == 0.0, (eps, row)
        out = grpo_clipped_loss(diff[row : row + 1], torch.zeros(1), torch.ones(1), eps * 0.999)
        assert out.clipfrac.item() == 1.0, (eps, row)

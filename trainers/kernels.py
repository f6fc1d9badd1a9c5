"""Sampling kernels for flow-matching policies: the Flow-GRPO SDE step with its Gaussian log-density, the CPS
variant, the Euler ODE step, SDE windows and the closed-form step KL.

Conventions (``shared/papers/algorithms.md`` §1): σ ∈ [0, 1], x_σ = (1 − σ)·x0 + σ·ε, velocity v = ε − x0,
denoising goes from σ to σ' < σ with dt = σ' − σ < 0.

Log-densities are **sums** over latent dimensions by default (``reduce="sum"``): the honest log-density of the
step's Gaussian, so exp(logπ_θ − logπ_old) is a true likelihood ratio. The Flow-GRPO reference code averages over
dimensions instead (``reduce="mean"``), which divides every log-ratio by D (the number of latent elements) and is why
its clip range is 1e-4. With the sum, a clip range in the PPO range (0.1-0.3) is the matching choice; for a mean-reduced
log-density use ε_mean ≈ log(1 + ε_sum)/D. The KL uses the same reduction as the log-density so β means the same
thing for both. Everything here runs in float32 whatever dtype the model produced.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal

import torch

Reduce = Literal["sum", "mean"]
LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


@dataclass
class StepOutput:
    """One stochastic (or deterministic) denoising step."""

    prev_sample: torch.Tensor  # [B, ...] x_{σ'} (float32)
    log_prob: torch.Tensor  # [B] float64 log N(prev_sample; mean, std²) over latent dims (0 for ODE steps)
    mean: torch.Tensor  # [B, ...] μ of the step Gaussian
    std: torch.Tensor  # [B] per-sample standard deviation of the step (0 for ODE steps)


def _bcast(t: torch.Tensor | float, like: torch.Tensor) -> torch.Tensor:
    """A scalar or per-sample [B] tensor -> float32 broadcastable against `like` [B, ...]."""
    t = torch.as_tensor(t, dtype=torch.float32, device=like.device)
    if t.ndim == 0:
        t = t.expand(like.shape[0])
    return t.reshape(-1, *([1] * (like.ndim - 1)))


def reduce_dims(x: torch.Tensor, reduce: Reduce = "sum") -> torch.Tensor:
    """[B, ...] -> [B] float64: sum (true density) or mean (reference code) over every non-batch dimension.

    Accumulated in float64: a summed log-density of a 1024 px latent (D = 262,144) is about 2e5, where float32 steps
    are 1/64, and the PPO log-ratio, a difference of two such sums, would move in steps of 1/64 (0.08 of a 0.2 clip
    range)."""
    dims = tuple(range(1, x.ndim))
    if reduce == "sum":
        return x.sum(dim=dims, dtype=torch.float64)
    if reduce == "mean":
        return x.mean(dim=dims, dtype=torch.float64)
    raise ValueError(f"reduce must be 'sum' or 'mean', got {reduce!r}")


def gaussian_log_prob(
    x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor | float, reduce: Reduce = "sum"
) -> torch.Tensor:
    """log N(x; mean, std²·I) per sample, reduced over latent dims.  x, mean: [B, ...]; std: scalar or [B] -> [B]
    (float64; the elementwise terms in float32).

    Each element contributes −(x − μ)²/(2s²) − log s − ½·log 2π (the isotropic Gaussian density)."""
    x, mean = x.float(), mean.float()
    s = _bcast(std, x)
    lp = -((x - mean) ** 2) / (2 * s**2) - torch.log(s) - LOG_SQRT_2PI
    return reduce_dims(lp, reduce)


def sde_sigma_scale(
    sigma: torch.Tensor | float, sigma_next_of_one: torch.Tensor | float, noise_level: float
) -> torch.Tensor:
    """Flow-GRPO noise coefficient ς = a·sqrt(σ/(1 − σ)) (algorithms.md §2); at σ = 1 the denominator uses the next
    sigma of the schedule (`sigma_next_of_one`, the reference code's ``sigmas[1]``) to stay finite."""
    sigma = torch.as_tensor(sigma, dtype=torch.float32)
    s1 = torch.as_tensor(sigma_next_of_one, dtype=torch.float32)
    denom = 1 - torch.where(sigma >= 1, s1, sigma)
    return noise_level * torch.sqrt(sigma / denom)


def ode_step(
    x: torch.Tensor, v: torch.Tensor, sigma: torch.Tensor | float, sigma_next: torch.Tensor | float
) -> StepOutput:
    """Euler step of the probability-flow ODE: x' = x + v·(σ' − σ).  x, v: [B, ...]; σ, σ': scalar or [B]."""
    x32, v32 = x.float(), v.float()
    dt = _bcast(sigma_next, x32) - _bcast(sigma, x32)
    prev = x32 + v32 * dt
    zero_log_prob = torch.zeros(x.shape[0], dtype=torch.float64, device=x.device)  # the SDE steps' dtype
    zero_std = torch.zeros(x.shape[0], dtype=torch.float32, device=x.device)
    return StepOutput(prev, zero_log_prob, prev, zero_std)


def _check_block(x: torch.Tensor, block: int) -> None:
    if x.ndim != 4 or x.shape[-1] % block or x.shape[-2] % block:
        raise ValueError(
            f"sampling.noise_block={block} needs latents [B, C, H, W] with H and W divisible by it, got "
            f"{tuple(x.shape)}: use a divisor of the latent size, or noise_block 1 (packed latents such as FLUX's)"
        )


def block_coords(x: torch.Tensor, block: int) -> torch.Tensor:
    """Uᵀx for the orthonormal basis U of block-constant latents: [B, C, H, W] -> [B, C, H/b, W/b].

    A basis vector is a b×b block's indicator divided by b, so Uᵀx is each block's sum divided by b (= b·mean)."""
    if block == 1:
        return x
    _check_block(x, block)
    return torch.nn.functional.avg_pool2d(x, block) * block


def block_project(x: torch.Tensor, block: int) -> torch.Tensor:
    """P = UUᵀ, the orthogonal projection onto block-constant latents: every b×b block replaced by its mean.
    [B, C, H, W] -> same. P·ε with ε ~ N(0, I) is a standard Gaussian in that subspace."""
    if block == 1:
        return x
    _check_block(x, block)
    return torch.nn.functional.interpolate(torch.nn.functional.avg_pool2d(x, block), scale_factor=block)


def flow_sde_mean_std(
    x: torch.Tensor,
    v: torch.Tensor,
    sigma: torch.Tensor | float,
    sigma_next: torch.Tensor | float,
    noise_level: float,
    sigma_next_of_one: torch.Tensor | float,
    block: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean [B, ...] and std [B] of the Flow-GRPO SDE step (Liu et al. 2025, Flow-GRPO eq. 8-9; algorithms.md §2):

    μ = x + v·dt + (ς²/(2σ))·(x + (1 − σ)·v)·dt,    std = ς·sqrt(−dt),   dt = σ' − σ < 0.

    ``block`` > 1 puts the noise in the subspace of block-constant latents only (diffusion matrix ς·P, P the
    projection :func:`block_project`): the score correction is projected too, μ = x + v·dt + P[(ς²/(2σ))·(x + (1 −
    σ)·v)]·dt, which keeps the ODE's marginals for any positive semi-definite diffusion matrix (Song et al. 2021,
    score SDEs, the reverse SDE with a general G(t): drift f − ½GGᵀ∇log p). The complement follows the ODE.
    """
    x32, v32 = x.float(), v.float()
    sig = _bcast(sigma, x32)
    dt = _bcast(sigma_next, x32) - sig
    scale = _bcast(sde_sigma_scale(sigma, sigma_next_of_one, noise_level).to(x.device), x32)
    correction = (scale**2 / (2 * sig)) * (x32 + (1 - sig) * v32) * dt
    mean = x32 + v32 * dt + block_project(correction, block)
    std = (scale * torch.sqrt(-dt)).reshape(-1)
    return mean, std


def flow_sde_step(
    x: torch.Tensor,
    v: torch.Tensor,
    sigma: torch.Tensor | float,
    sigma_next: torch.Tensor | float,
    noise_level: float,
    sigma_next_of_one: torch.Tensor | float,
    noise: torch.Tensor | None = None,
    prev_sample: torch.Tensor | None = None,
    reduce: Reduce = "sum",
    block: int = 1,
) -> StepOutput:
    """One Flow-GRPO SDE step. Sample x' = μ + std·noise, or, given a stored `prev_sample`, evaluate its log-density
    under the (possibly updated) model's μ. With ``noise_level = 0`` this is exactly :func:`ode_step`'s update.

    ``block`` > 1: the noise is P·noise (block-constant, see :func:`flow_sde_mean_std`) and the log-density is the
    Gaussian's in the block coordinates Uᵀx (C·H·W/b² dimensions); the complement is deterministic given x, so the
    policy gradient only sees the block-constant part of μ. Fewer noise dimensions carrying the same reward-relevant
    (low-frequency) perturbations should give a lower-variance score-function gradient; on the shapes model the
    measured signal did not rise (``bench/grad_snr.py``)."""
    mean, std = flow_sde_mean_std(x, v, sigma, sigma_next, noise_level, sigma_next_of_one, block)
    if prev_sample is None:
        if noise_level == 0:
            return StepOutput(mean, torch.zeros_like(std, dtype=torch.float64), mean, std)
        if noise is None:
            raise ValueError("flow_sde_step: pass `noise` (to sample) or `prev_sample` (to evaluate)")
        prev_sample = mean + _bcast(std, mean) * block_project(noise.float(), block)
    prev_sample = prev_sample.float()
    lp = (
        gaussian_log_prob(block_coords(prev_sample.detach(), block), block_coords(mean, block), std, reduce)
        if noise_level > 0
        else torch.zeros_like(std, dtype=torch.float64)  # the dtype of every step's log-density (StepOutput)
    )
    return StepOutput(prev_sample, lp, mean, std)


def cps_mean_std(
    x: torch.Tensor,
    v: torch.Tensor,
    sigma: torch.Tensor | float,
    sigma_next: torch.Tensor | float,
    noise_level: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Coefficients-preserving SDE step (algorithms.md §2, CPS): std = σ'·sin(aπ/2), x̂0 = x − σv, x̂1 = x + (1 − σ)v,
    μ = (1 − σ')·x̂0 + sqrt(σ'² − std²)·x̂1.  x, v: [B, ...] -> mean [B, ...], std [B]."""
    x32, v32 = x.float(), v.float()
    sig, sig_n = _bcast(sigma, x32), _bcast(sigma_next, x32)
    std = sig_n * math.sin(noise_level * math.pi / 2)
    x0_hat = x32 - sig * v32
    x1_hat = x32 + (1 - sig) * v32
    mean = (1 - sig_n) * x0_hat + torch.sqrt((sig_n**2 - std**2).clamp_min(0)) * x1_hat
    return mean, std.reshape(-1)


def cps_step(
    x: torch.Tensor,
    v: torch.Tensor,
    sigma: torch.Tensor | float,
    sigma_next: torch.Tensor | float,
    noise_level: float,
    noise: torch.Tensor | None = None,
    prev_sample: torch.Tensor | None = None,
    reduce: Reduce = "sum",
) -> StepOutput:
    """One CPS step; sampling or evaluating a stored `prev_sample` like :func:`flow_sde_step`. At σ' = 0 the std is 0
    (a deterministic step, log-density 0)."""
    mean, std = cps_mean_std(x, v, sigma, sigma_next, noise_level)
    if prev_sample is None:
        if noise is None and bool((std > 0).any()):
            raise ValueError("cps_step: pass `noise` (to sample) or `prev_sample` (to evaluate)")
        prev_sample = mean if noise is None else mean + _bcast(std, mean) * noise.float()
    prev_sample = prev_sample.float()
    safe = torch.where(std > 0, std, torch.ones_like(std))
    lp = gaussian_log_prob(prev_sample.detach(), mean, safe, reduce)
    lp = torch.where(std > 0, lp, torch.zeros_like(lp))
    return StepOutput(prev_sample, lp, mean, std)


def velocity_score_scale(
    kernel: Literal["sde", "cps"],
    sigma: float,
    sigma_next: float,
    noise_level: float,
    sigma_next_of_one: float,
) -> float:
    """|∂μ/∂v| / std of one stochastic step: how strongly the step's log-density gradient weighs the velocity.

    ∇_v logπ(x'|x) = (x' − μ)/std² · ∂μ/∂v = ε · (∂μ/∂v)/std, with ε ~ N(0, I) the step's noise. Flow-GRPO SDE
    (algorithms.md §2): ∂μ/∂v = dt·(1 + ς²(1 − σ)/(2σ)) and std = ς·sqrt(−dt); CPS: ∂μ/∂v = −(1 − σ')σ +
    sqrt(σ'² − std²)(1 − σ). For the SDE the scale grows from ~0.1 at σ = 1 to ~2 near σ = 0 on a 10-step
    schedule, so with equal weights the low-noise steps dominate the policy gradient."""
    if kernel == "sde":
        dt = sigma_next - sigma
        scale = float(sde_sigma_scale(sigma, sigma_next_of_one, noise_level))
        dmu_dv = -dt * (1 + scale**2 * (1 - sigma) / (2 * sigma))
        return dmu_dv / (scale * math.sqrt(-dt))
    if kernel == "cps":
        std = sigma_next * math.sin(noise_level * math.pi / 2)
        if std <= 0:
            raise ValueError(f"CPS step to sigma' = {sigma_next} is deterministic: no score scale")
        dmu_dv = -(1 - sigma_next) * sigma + math.sqrt(max(sigma_next**2 - std**2, 0.0)) * (1 - sigma)
        return abs(dmu_dv) / std
    raise ValueError(f"unknown kernel {kernel!r}; valid: sde, cps")


def velocity_step_weights(
    kernel: Literal["sde", "cps"], sigmas: list[float], steps: list[int], noise_level: float
) -> dict[int, float]:
    """Per-step loss weights w_i ∝ 1/velocity_score_scale, normalised to mean 1 over `steps` (the trained steps).

    Weighting step i's surrogate by w_i makes every trained step's gradient ε·∂v_θ/∂θ·A on the velocity scale, so
    the high-noise steps, where the composition (and most of a GenEval-style reward's spread) is decided, are no
    longer drowned by the low-noise steps' larger score (objective.step_weight: velocity)."""
    inv = {
        i: 1.0 / velocity_score_scale(kernel, sigmas[i], sigmas[i + 1], noise_level, sigmas[1]) for i in steps
    }
    mean = sum(inv.values()) / len(inv)
    return {i: w / mean for i, w in inv.items()}


def gaussian_kl_equal_std(
    mean_p: torch.Tensor,
    mean_q: torch.Tensor,
    std: torch.Tensor | float,
    reduce: Reduce = "sum",
    block: int = 1,
) -> torch.Tensor:
    """KL(N(μ_p, s²I) ‖ N(μ_q, s²I)) = ‖μ_p − μ_q‖²/(2s²) per sample (algorithms.md §2: s² = ς²|dt|, the step's
    actual variance; the reference code divides by ς² only). [B, ...] -> [B], reduced like the log-density.
    ``block`` > 1: the KL of the block-noise step's Gaussian part, in the block coordinates Uᵀμ."""
    mp, mq = block_coords(mean_p.float(), block), block_coords(mean_q.float(), block)
    s = _bcast(std, mp)
    return reduce_dims((mp - mq) ** 2 / (2 * s**2), reduce).float()  # a sum of squares: float32 holds it


def sde_window(
    num_steps: int, window_size: int | None, rng: random.Random, max_start: int | None = None
) -> list[int]:
    """Indices of the trained (SDE) steps among `num_steps` denoising steps.

    ``window_size`` None or ≥ num_steps − 1: every step but the last (its σ' = 0 makes the log-density degenerate).
    Otherwise a window of `window_size` consecutive steps starting uniformly in the first half (or in
    ``[0, max_start]``); all other steps are deterministic ODE steps shared by the group (Flow-GRPO-Fast / MixGRPO)."""
    trainable = num_steps - 1
    if trainable < 1:
        raise ValueError(f"need at least 2 denoising steps to train, got {num_steps}")
    if window_size is None or window_size >= trainable:
        return list(range(trainable))
    if window_size < 1:
        raise ValueError(f"window_size must be at least 1, got {window_size}")
    first_half = max(num_steps // 2 - 1, 0)  # the last start index in the first half (4 of 0..9 for 10 steps)
    hi = min(trainable - window_size, first_half if max_start is None else max_start)
    start = rng.randint(0, max(hi, 0))
    return list(range(start, start + window_size))

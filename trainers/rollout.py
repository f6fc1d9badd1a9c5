"""Rollouts: sample G images per prompt with the current policy and keep what training needs.

Rollout strategy contract (registered in :data:`imgalign.trainers.registry.ROLLOUTS`)::

    strategy(ctx: RolloutContext, prompts [B], metadata [B], sample_ids [B], group_ids [B]) -> Rollout

Rows are samples for flat rollouts; a strategy may instead return other trainable units (e.g. tree edges) as rows,
with ``train_mask`` saying which step each row trains and ``extras["credit"]`` computing their advantages.

Every sample's randomness (initial noise and every SDE step's noise) comes from its own generator seeded by
(seed, step, global sample index): samples differ on every process, and the result does not depend on how samples
are split over processes or forward batches, which is what makes multi-process runs and resumes reproducible.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from imgalign.adapters import Cond, FlowAdapter
from imgalign.trainers import kernels as K
from imgalign.trainers.config import SamplingConfig
from imgalign.trainers.prompting import _mix
from imgalign.trainers.registry import ROLLOUTS


@dataclass
class RolloutContext:
    adapter: FlowAdapter
    model: torch.nn.Module  # the (possibly DDP-wrapped) transformer to sample with
    cfg: SamplingConfig
    seed: int
    step: int
    logprob_reduce: str = "sum"


@dataclass
class Rollout:
    prompts: list[str]  # [B]
    metadata: list[dict[str, Any]]  # [B]
    sample_ids: torch.Tensor  # [B] global sample index within the step
    group_ids: torch.Tensor  # [B] global group (prompt) index
    cond: Cond  # [B]
    sigmas: torch.Tensor  # [S + 1]
    latents: torch.Tensor  # [B, S + 1, ...] the whole trajectory, float32
    log_probs: torch.Tensor  # [B, S] behaviour log-densities (0 on deterministic steps)
    train_steps: list[int]  # denoising-step indices whose transitions are trained
    images: torch.Tensor  # [B, 3, H, W] in [0, 1]
    nfe: int  # transformer evaluations spent on this rollout (CFG counts 2)
    # [B, S] bool: which transitions of each row are trained (None: every row at every step of `train_steps`);
    # lets strategies whose rows are tree edges train each edge at its own branch step only
    train_mask: torch.Tensor | None = None
    # "credit": optional callable(scores [K, N] gathered over processes, balanced: Balanced) -> (advantages [B],
    # valid [B]) for strategies with their own credit assignment (tree rollouts: per-edge advantages)
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def x0(self) -> torch.Tensor:
        return self.latents[:, -1]


def step_kernel(
    kernel: str,
    x: torch.Tensor,
    v: torch.Tensor,
    sigmas: torch.Tensor,
    i: int,
    noise_level: float,
    noise: torch.Tensor | None = None,
    prev_sample: torch.Tensor | None = None,
    reduce: str = "sum",
) -> K.StepOutput:
    """Dispatch one stochastic transition i -> i+1 to the configured kernel."""
    if kernel == "sde":
        return K.flow_sde_step(
            x,
            v,
            sigmas[i],
            sigmas[i + 1],
            noise_level,
            sigmas[1],
            noise,
            prev_sample,
            reduce,  # type: ignore[arg-type]
        )
    if kernel == "cps":
        return K.cps_step(x, v, sigmas[i], sigmas[i + 1], noise_level, noise, prev_sample, reduce)  # type: ignore[arg-type]
    raise ValueError(f"unknown kernel {kernel!r}; valid: sde, cps")


def trained_steps(cfg: SamplingConfig, seed: int, step: int) -> list[int]:
    """The SDE (trained) steps of a training step: the same on every process."""
    rng = random.Random(_mix(seed, step, 17))
    return K.sde_window(cfg.num_steps, cfg.sde_window or None, rng)


@torch.no_grad()
def sample_trajectories(
    ctx: RolloutContext,
    cond: Cond,
    sample_ids: torch.Tensor,
    train_steps: list[int],
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Run the sampler for a batch: SDE transitions at `train_steps`, Euler ODE elsewhere.
    Returns latents [B, S + 1, ...], log_probs [B, S] and the NFEs spent."""
    a, cfg = ctx.adapter, ctx.cfg
    gens = [torch.Generator().manual_seed(_mix(ctx.seed, ctx.step, int(i))) for i in sample_ids]
    x = a.init_noise(gens)
    sig = a.sigmas(cfg.num_steps).to(x.device)
    traj = [x.float()]
    lps = torch.zeros(x.shape[0], cfg.num_steps)
    trained = set(train_steps)
    for i in range(cfg.num_steps):
        v = a.velocity(x, sig[i], cond, cfg.guidance_scale, transformer=ctx.model)
        if i in trained:
            noise = torch.stack([torch.randn(x.shape[1:], generator=g) for g in gens]).to(x.device)
            out = step_kernel(
                cfg.kernel, x, v, sig, i, cfg.noise_level, noise=noise, reduce=ctx.logprob_reduce
            )
            lps[:, i] = out.log_prob.cpu()
        else:
            out = K.ode_step(x, v, sig[i], sig[i + 1])
        x = out.prev_sample
        traj.append(x)
    nfe = x.shape[0] * cfg.num_steps * a.nfe_per_step(cfg.guidance_scale)
    return torch.stack(traj, dim=1), lps, nfe


@ROLLOUTS.register("flat")
def flat_rollout(
    ctx: RolloutContext,
    prompts: list[str],
    metadata: list[dict[str, Any]],
    sample_ids: torch.Tensor,
    group_ids: torch.Tensor,
) -> Rollout:
    """Flow-GRPO rollouts: every sample is an independent trajectory from its own noise (G per prompt)."""
    a, cfg = ctx.adapter, ctx.cfg
    train_steps = trained_steps(cfg, ctx.seed, ctx.step)
    lat, lps, imgs, nfe = [], [], [], 0
    conds = []
    for s in range(0, len(prompts), cfg.batch_size):
        sl = slice(s, s + cfg.batch_size)
        cond = a.encode(prompts[sl])
        traj, lp, n = sample_trajectories(ctx, cond, sample_ids[sl], train_steps)
        lat.append(traj)
        lps.append(lp)
        imgs.append(a.decode(traj[:, -1]).cpu())
        conds.append(cond)
        nfe += n
    return Rollout(
        prompts=list(prompts),
        metadata=list(metadata),
        sample_ids=sample_ids,
        group_ids=group_ids,
        cond=Cond.cat(conds),
        sigmas=a.sigmas(cfg.num_steps),
        latents=torch.cat(lat),
        log_probs=torch.cat(lps),
        train_steps=train_steps,
        images=torch.cat(imgs),
        nfe=nfe,
    )


RolloutStrategy = Callable[..., Rollout]

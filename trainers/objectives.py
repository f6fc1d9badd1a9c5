"""Training objectives on rollouts.

Objective contract (registered in :data:`imgalign.trainers.registry.OBJECTIVES`): a class built as
``Objective(cfg: ObjectiveConfig, sampling: SamplingConfig)`` with

- ``terms(rollout) -> list[int]``: the loss terms of one sample (GRPO: its trained denoising steps; an x0-based
  objective such as NFT: its fresh-noise draws),
- ``loss(ctx, rollout, idx, term, advantages, valid) -> (loss, metrics)`` for the samples `idx` [b] of the rollout.

Optional hooks: ``after_update(params)`` after every optimizer step (e.g. NFT's EMA old policy), and
``state_dict()`` / ``load_state_dict(state)`` for objective state that checkpoints must carry (tensors and plain
Python values only: it is loaded with ``weights_only=True``).

The trainer averages ``loss`` over terms and micro-batches, so an objective only ever sees one micro-batch.
A velocity penalty (``objective.penalty``, e.g. the velocity-norm hinge) composes with any objective that produces
(v_θ, v_ref): :func:`add_penalty` adds λ·mean(penalty(v_θ, v_ref)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from imgalign.adapters import FlowAdapter
from imgalign.trainers import kernels as K
from imgalign.trainers.config import ObjectiveConfig, SamplingConfig
from imgalign.trainers.grpo import grpo_clipped_loss
from imgalign.trainers.registry import OBJECTIVES, PENALTIES
from imgalign.trainers.rollout import Rollout, step_kernel


@dataclass
class TrainContext:
    adapter: FlowAdapter
    model: torch.nn.Module  # the (possibly DDP-wrapped) transformer with gradients
    step: int


def _masked_mean(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x * w).sum() / w.sum().clamp_min(1.0)


def add_penalty(
    cfg: ObjectiveConfig,
    loss: torch.Tensor,
    v: torch.Tensor,
    v_ref: torch.Tensor,
    w: torch.Tensor,
    metrics: dict,
) -> torch.Tensor:
    """loss + λ·mean_b(penalty(v_θ, v_ref)); logs the penalty and the norm ratio ‖v_θ‖/‖v_ref‖."""
    with torch.no_grad():
        ratio = v.flatten(1).norm(dim=1) / v_ref.flatten(1).norm(dim=1).clamp_min(1e-12)
        metrics["policy/vnorm_ratio"] = float(_masked_mean(ratio, w))
    if cfg.penalty_weight <= 0:
        return loss
    fn = PENALTIES.get(cfg.penalty)
    pen = fn(v, v_ref.detach()).reshape(-1)
    metrics["policy/penalty"] = float(_masked_mean(pen.detach(), w))
    return loss + cfg.penalty_weight * _masked_mean(pen, w)


@PENALTIES.register("vnorm")
def vnorm_linear(v_theta: torch.Tensor, v_ref: torch.Tensor) -> torch.Tensor:
    """The velocity-norm hinge max(0, ‖v_θ‖/‖v_ref‖ − 1) per sample (:mod:`imgalign.trainers.vnorm`)."""
    from imgalign.trainers.vnorm import velocity_norm_penalty

    return velocity_norm_penalty(v_theta, v_ref, form="linear")


@PENALTIES.register("vnorm_squared")
def vnorm_squared(v_theta: torch.Tensor, v_ref: torch.Tensor) -> torch.Tensor:
    """The squared velocity-norm hinge max(0, ‖v_θ‖/‖v_ref‖ − 1)² per sample."""
    from imgalign.trainers.vnorm import velocity_norm_penalty

    return velocity_norm_penalty(v_theta, v_ref, form="squared")


@OBJECTIVES.register("grpo")
class GRPOObjective:
    """Flow-GRPO (Liu et al. 2025, eq. 4-6): clipped surrogate on each trained SDE transition, plus β·KL to the
    frozen base in closed form with the step's actual variance (algorithms.md §2)."""

    needs_reference = False

    def __init__(self, cfg: ObjectiveConfig, sampling: SamplingConfig) -> None:
        self.cfg, self.sampling = cfg, sampling
        self.needs_reference = cfg.kl_beta > 0 or cfg.penalty_weight > 0

    def terms(self, rollout: Rollout) -> list[int]:
        return list(rollout.train_steps)

    def loss(
        self,
        ctx: TrainContext,
        rollout: Rollout,
        idx: torch.Tensor,
        term: int,
        advantages: torch.Tensor,
        valid: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        s, c = self.sampling, self.cfg
        a = ctx.adapter
        i = term
        dev = a.device
        x_t = rollout.latents[idx, i].to(dev)  # [b, ...]
        x_next = rollout.latents[idx, i + 1].to(dev)
        sig = rollout.sigmas.to(dev)
        cond = rollout.cond.index(idx)
        v = a.velocity(x_t, sig[i], cond, s.guidance_scale, transformer=ctx.model)
        out = step_kernel(
            s.kernel, x_t, v, sig, i, s.noise_level, prev_sample=x_next, reduce=c.logprob_reduce
        )
        w = valid[idx].float().to(dev)
        if rollout.train_mask is not None:
            w = w * rollout.train_mask[idx, i].float().to(dev)
        sur = grpo_clipped_loss(
            out.log_prob, rollout.log_probs[idx, i].to(dev), advantages[idx].to(dev), c.clip_range, w
        )
        loss = sur.loss
        metrics: dict[str, Any] = {
            "policy/loss": float(sur.loss.detach()),
            "policy/approx_kl": float(sur.approx_kl),
            "policy/clipfrac": float(sur.clipfrac),
            "policy/ratio_mean": float(_masked_mean(sur.ratio, w)),
            "policy/ratio_min": float(sur.ratio.min()),
            "policy/ratio_max": float(sur.ratio.max()),
            "policy/logprob": float(_masked_mean(out.log_prob.detach(), w)),
        }
        if self.needs_reference:
            with torch.no_grad(), a.reference() as ref:
                v_ref = a.velocity(x_t, sig[i], cond, s.guidance_scale, transformer=ref)
                ref_out = step_kernel(
                    s.kernel, x_t, v_ref, sig, i, s.noise_level, prev_sample=x_next, reduce=c.logprob_reduce
                )
            kl = K.gaussian_kl_equal_std(out.mean, ref_out.mean, out.std, c.logprob_reduce)  # [b]
            metrics["policy/kl"] = float(_masked_mean(kl.detach(), w))
            if c.kl_beta > 0:
                loss = loss + c.kl_beta * _masked_mean(kl, w)
            loss = add_penalty(c, loss, v, v_ref, w, metrics)
        return loss, metrics

"""GRPO math as pure functions: group advantages with zero-std filtering, and the clipped surrogate.

References: Shao et al. 2024 (GRPO); Liu et al. 2025, Flow-GRPO eq. 4-6 (algorithms.md §2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

StdMode = Literal["group", "batch"]


@dataclass
class Advantages:
    advantages: torch.Tensor  # [N] float32; 0 where `valid` is False
    valid: torch.Tensor  # [N] bool: sample belongs to a group with non-tied rewards and has a finite reward
    zero_std_ratio: float  # share of groups dropped because every (finite) reward in them ties


def group_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    std_mode: StdMode = "group",
    clip: float | None = 5.0,
    eps: float = 1e-4,
    finite: torch.Tensor | None = None,
    tie_tol: float = 1e-6,
) -> Advantages:
    """A_i = (r_i − mean_group(i)) / (std + eps), clipped to ±clip.  rewards, group_ids: [N] -> [N].

    ``std_mode="group"``: std of the sample's own group; ``"batch"``: the std of every finite reward in the batch,
    tied groups included (the reference code's ``global_std``). Groups whose rewards all tie (std ≤ tie_tol) carry
    no signal and are dropped (advantage 0, ``valid`` False); their share is ``zero_std_ratio``. Samples with ``finite`` False (a NaN or
    infinite reward, already masked by the caller) take no part in any statistic and get advantage 0."""
    r = rewards.float()
    finite = torch.isfinite(r) if finite is None else (finite & torch.isfinite(r))
    r = torch.where(finite, r, torch.zeros_like(r))
    adv = torch.zeros_like(r)
    valid = torch.zeros_like(finite)
    groups = torch.unique(group_ids)
    n_tied = 0
    for g in groups:
        m = (group_ids == g) & finite
        if int(m.sum()) < 2 or float(r[m].std(unbiased=False)) <= tie_tol:
            n_tied += 1
            continue
        adv[m] = r[m] - r[m].mean()
        valid |= m
    if std_mode == "group":
        for g in groups:
            m = (group_ids == g) & valid
            if m.any():
                adv[m] = adv[m] / (r[m].std(unbiased=False) + eps)
    elif std_mode == "batch":
        if valid.any():
            adv = adv / (r[finite].std(unbiased=False) + eps)
    else:
        raise ValueError(f"std_mode must be 'group' or 'batch', got {std_mode!r}")
    if clip is not None and clip > 0:  # 0 = no clip, as in the balancers and tree credit
        adv = adv.clamp(-clip, clip)
    adv = torch.where(valid, adv, torch.zeros_like(adv))
    return Advantages(adv, valid, n_tied / max(len(groups), 1))


@dataclass
class SurrogateOutput:
    loss: torch.Tensor  # scalar
    ratio: torch.Tensor  # [B] detached
    clipfrac: torch.Tensor  # scalar: share of samples with |ρ − 1| > ε (PPO's clip fraction, either sign)
    approx_kl: torch.Tensor  # scalar: ½·mean((logπ_θ − logπ_old)²) (Schulman's k2 estimator)


def grpo_clipped_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    clip_range: float,
    weights: torch.Tensor | None = None,
) -> SurrogateOutput:
    """PPO/GRPO clipped surrogate: mean(max(−A·ρ, −A·clip(ρ, 1 − ε, 1 + ε))), ρ = exp(logπ_θ − logπ_old).
    log_prob, old_log_prob, advantages: [B] -> scalar. `weights` [B] (≥ 0; the trainer passes 0/1 masks) make it a
    weighted mean."""
    # the difference of two float64 sums (kernels.reduce_dims) is small, so float32 holds it exactly enough
    diff = (log_prob.double() - old_log_prob.double()).float()
    ratio = torch.exp(diff)
    a = advantages.float()
    unclipped = -a * ratio
    clipped = -a * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)
    per = torch.maximum(unclipped, clipped)
    w = torch.ones_like(per) if weights is None else weights.float()
    per = torch.where(w > 0, per, torch.zeros_like(per))  # a masked row may be NaN, and NaN·0 is NaN
    # a weighted mean: sum(w·x) / sum(w); 1 where every weight is 0 (no sample counts: the loss is 0, not NaN)
    total = w.sum()
    denom = torch.where(total > 0, total, torch.ones_like(total))
    loss = (per * w).sum() / denom
    with torch.no_grad():
        clipfrac = (((ratio - 1.0).abs() > clip_range).float() * w).sum() / denom
        approx_kl = (0.5 * torch.where(w > 0, diff, torch.zeros_like(diff)) ** 2 * w).sum() / denom
    return SurrogateOutput(loss, ratio.detach(), clipfrac, approx_kl)


# approx_kl above this: the update left the trust region PPO's clip assumes (typical values: 0.01-0.1)
OFF_POLICY_KL = 1.0


def off_policy_warning(approx_kl: float, lr: float, warmup_steps: int) -> str | None:
    """A message when one step's mean ``policy/approx_kl`` exceeds :data:`OFF_POLICY_KL`, else None.

    With AdamW the first updates move every weight by about the learning rate whatever the gradient, so a large lr
    without warm-up puts the second update of the first step far off-policy: on the shapes model lr 1e-4 without
    warm-up gave approx_kl 77 at step 1 and a flat training reward; lr 5e-5 after 20 warm-up updates gave 0.002."""
    if not math.isfinite(approx_kl) or approx_kl <= OFF_POLICY_KL:
        return None
    hint = "lower train.lr" if warmup_steps else "set train.warmup_steps (e.g. 20) or lower train.lr"
    return (
        f"policy/approx_kl = {approx_kl:.3g} > {OFF_POLICY_KL}: the update moved the policy far from the one that "
        f"sampled the rollouts (lr {lr:g}, warm-up {warmup_steps} updates); the clipped surrogate then zeroes "
        f"the gradient of many samples. {hint}"
    )

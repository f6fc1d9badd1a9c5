"""Velocity-norm hinge penalty against RL norm inflation, and the inflation ratio per step bucket.

Follows ``shared/papers/algorithms.md`` section 5 and the velocity-norm paper's abstract (``abstracts.md``): RL
fine-tuning inflates the per-step velocity norm ||v_theta|| by 5-15% over the reference; the fix is a training-time
hinge that is zero unless ||v_theta|| > ||v_ref|| (norm per sample over the latent dimensions, per step), added to
any velocity-local base loss (Flow-GRPO's per-step loss, DiffusionNFT, AWM).

Form of the penalty (our choice, documented): on the norm *ratio* rho_i = ||v_theta,i|| / ||v_ref,i||,

    linear  (default):  P_i = max(0, rho_i - 1)
    squared:            P_i = max(0, rho_i - 1)^2

The ratio makes lambda independent of latent size and of the step's velocity scale (early and late steps have
different ||v||), and reads directly as the inflation (lambda·0.01 per 1% inflation). Linear is the default because
it is an exact penalty: once lambda exceeds the reward gradient's component along the norm direction the optimum sits
*at* ||v_theta|| = ||v_ref|| (the acceptance target is <= 1% inflation), whereas the squared hinge's gradient vanishes
at the boundary and always leaves an inflation of order (reward pull)/(2·lambda). The squared form is smooth, for
users who see the kink cause oscillation. v_ref is detached: the penalty never moves the reference.

Integration: wherever the base loss evaluates v_theta on latents x [B, ...] at step index k, also evaluate the frozen
reference (LoRA disabled / base weights) under ``torch.no_grad()`` at the same (x, sigma, conditioning), then

    pen = velocity_norm_penalty(v_theta, v_ref, form="linear")      # [B]
    loss = loss + penalty_weight * pen.mean()
    meter.update(v_theta, v_ref, step_index=k, num_steps=T)         # logging only
    metrics.update(meter.compute())  # {'vnorm/norm_ratio/early': ..., '/middle', '/late', '/all'}

For NFT (no sampling step), use bucket_by="sigma" with the sampled t instead of a step index.

In ``imgalign train``: the hinge is ``objective.penalty: vnorm`` (or ``vnorm_squared``) with weight
``objective.penalty_weight``; the ratio per bucket is logged as ``vnorm/norm_ratio/<bucket>`` whenever the update
evaluates the reference (KL, penalty, or ``objective.vnorm_log: true``), and at every evaluation as
``eval/vnorm/norm_ratio/<bucket>`` along the policy's ODE trajectories (``eval.vnorm_images``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch

BUCKETS = ("early", "middle", "late")


def velocity_norms(v: torch.Tensor) -> torch.Tensor:
    """Per-sample L2 norm over all latent dimensions, in float32. v [B, ...] -> [B]."""
    return v.float().flatten(1).norm(dim=1)


def norm_ratio(v_theta: torch.Tensor, v_ref: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """rho_i = ||v_theta,i|| / ||v_ref,i||, [B]; gradient flows only through v_theta."""
    if v_theta.shape != v_ref.shape:
        raise ValueError(
            f"norm_ratio: v_theta {tuple(v_theta.shape)} and v_ref {tuple(v_ref.shape)} must match"
        )
    return velocity_norms(v_theta) / velocity_norms(v_ref.detach()).clamp_min(eps)


def velocity_norm_penalty(
    v_theta: torch.Tensor, v_ref: torch.Tensor, form: Literal["linear", "squared"] = "linear"
) -> torch.Tensor:
    """Hinge penalty per sample [B]: max(0, rho - 1) (linear) or its square; exactly 0 when ||v_theta|| <= ||v_ref||.

    v_theta, v_ref [B, ...] (one trained step); v_ref is detached. See the module docstring for the choice of form.
    """
    excess = torch.relu(norm_ratio(v_theta, v_ref) - 1.0)  # [B]
    if form == "linear":
        return excess
    if form == "squared":
        return excess.pow(2)
    raise ValueError(f"velocity_norm_penalty: form must be 'linear' or 'squared', got {form!r}")


def step_bucket(step_index: int, num_steps: int) -> str:
    """Bucket of a sampling step: thirds of the schedule, step 0 (pure noise) is 'early'."""
    if not 0 <= step_index < num_steps:
        raise ValueError(f"step_bucket: step_index {step_index} outside [0, {num_steps})")
    return BUCKETS[min(3 * step_index // num_steps, 2)]


def sigma_bucket(sigma: float) -> str:
    """Bucket of a noise level sigma in [0, 1]: > 2/3 early, > 1/3 middle, else late (for NFT's sampled t)."""
    if sigma > 2.0 / 3.0:
        return "early"
    if sigma > 1.0 / 3.0:
        return "middle"
    return "late"


class InflationMeter:
    """Running mean of the norm ratio ||v_theta||/||v_ref|| per step bucket (early/middle/late) and overall.

    ``update`` takes one batch at one step (step_index/num_steps) or per-sample noise levels (sigma [B]);
    ``compute()`` returns flat metrics ``{prefix}/early`` etc. (NaN buckets omitted); ``reset()`` clears.
    """

    def __init__(self, prefix: str = "vnorm/norm_ratio") -> None:
        self.prefix = prefix
        self.reset()

    def reset(self) -> None:
        self.sums = dict.fromkeys(BUCKETS, 0.0)
        self.counts = dict.fromkeys(BUCKETS, 0)

    @torch.no_grad()
    def update(
        self,
        v_theta: torch.Tensor,
        v_ref: torch.Tensor,
        step_index: int | None = None,
        num_steps: int | None = None,
        sigma: torch.Tensor | None = None,
    ) -> None:
        ratio = norm_ratio(v_theta.detach(), v_ref).cpu()  # [B]
        if sigma is not None:
            buckets = [sigma_bucket(float(s)) for s in sigma.reshape(-1).cpu()]
            if len(buckets) != ratio.shape[0]:
                raise ValueError("InflationMeter.update: sigma must have one entry per sample")
        elif step_index is not None and num_steps is not None:
            buckets = [step_bucket(step_index, num_steps)] * ratio.shape[0]
        else:
            raise ValueError("InflationMeter.update: pass step_index and num_steps, or per-sample sigma")
        for b, r in zip(buckets, ratio.tolist()):
            self.sums[b] += r
            self.counts[b] += 1

    def compute(self) -> dict[str, float]:
        out = {f"{self.prefix}/{b}": self.sums[b] / self.counts[b] for b in BUCKETS if self.counts[b]}
        n = sum(self.counts.values())
        if n:
            out[f"{self.prefix}/all"] = sum(self.sums.values()) / n
        return out


def bucket_means(
    ratio: torch.Tensor,
    buckets: Sequence[str],
    prefix: str = "vnorm/norm_ratio",
    valid: torch.Tensor | None = None,
) -> dict[str, float]:
    """Mean norm ratio [B] per step bucket (buckets [B] of 'early'/'middle'/'late') and overall, as flat metrics
    ``{prefix}/<bucket>`` and ``{prefix}/all`` over the rows that `valid` [B] (bool; default all) keeps, as the
    objective's other metrics are (buckets without such rows are omitted)."""
    r = ratio.detach().float().reshape(-1).cpu()
    if len(buckets) != r.shape[0]:
        raise ValueError(f"bucket_means: {len(buckets)} bucket names for {r.shape[0]} ratios")
    keep = torch.ones_like(r, dtype=torch.bool) if valid is None else valid.detach().reshape(-1).cpu().bool()
    if keep.shape != r.shape:
        raise ValueError(f"bucket_means: {keep.numel()} valid flags for {r.shape[0]} ratios")
    out = {}
    for b in BUCKETS:
        m = torch.tensor([x == b for x in buckets], dtype=torch.bool) & keep
        if m.any():
            out[f"{prefix}/{b}"] = float(r[m].mean())
    if keep.any():
        out[f"{prefix}/all"] = float(r[keep].mean())
    return out


@torch.no_grad()
def inflation_along_ode(
    adapter: Any,
    model: torch.nn.Module,
    prompts: list[str],
    seeds: list[int],
    num_steps: int,
    guidance_scale: float,
    prefix: str = "eval/vnorm/norm_ratio",
) -> dict[str, float]:
    """The norm inflation ||v_theta||/||v_ref|| per step bucket along the policy's own deterministic (Euler ODE)
    trajectories, one per (prompt, seed): at every step both the policy `model` and the frozen reference
    (``adapter.reference()``) are evaluated at the same (x, sigma, conditioning), with the same guidance scale
    (algorithms.md section 5: the inflation the velocity-norm paper reports). Returns ``{prefix}/early`` etc."""
    meter = InflationMeter(prefix)
    sig = adapter.sigmas(num_steps).to(adapter.device)
    x = adapter.init_noise([torch.Generator().manual_seed(int(z)) for z in seeds])  # [B, ...]
    cond = adapter.encode(prompts)
    for i in range(num_steps):
        v = adapter.velocity(x, sig[i], cond, guidance_scale, transformer=model)
        with adapter.reference() as ref:
            v_ref = adapter.velocity(x, sig[i], cond, guidance_scale, transformer=ref)
        meter.update(v, v_ref, step_index=i, num_steps=num_steps)
        x = x + v * (sig[i + 1] - sig[i])
    return meter.compute()


def eval_inflation(
    adapter: Any,
    model: torch.nn.Module,
    cfg: Any,
    guidance_scale: float,
    test_prompts: list[tuple[str, dict[str, Any]]],
) -> dict[str, float]:
    """``eval/vnorm/norm_ratio/*`` for the trainer's evaluation (``cfg``: its EvalConfig): the first
    ``cfg.vnorm_images`` prompts of the evaluation set (shapes suite: its tasks in turn; reward suite: the held-out
    prompts), one seed each from ``cfg.seed`` (offset from the suite's image seeds, as the prompt-dependence images'
    are). Empty when there is nothing to measure."""
    from imgalign.trainers.prompting import _mix

    if cfg.vnorm_images <= 0:
        return {}
    from imgalign.trainers.evaluation import eval_prompt_pool

    prompts = eval_prompt_pool(cfg, test_prompts)[: cfg.vnorm_images]
    if not prompts:
        return {}
    seeds = [_mix(cfg.seed, 10_000 + i, 0) for i in range(len(prompts))]
    return inflation_along_ode(adapter, model, prompts, seeds, cfg.num_steps, guidance_scale)

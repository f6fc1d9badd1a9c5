"""DiffusionNFT: the negative-aware flow-matching objective on stored clean samples, and the EMA old policy.

Follows ``shared/papers/algorithms.md`` section 4 (DiffusionNFT). A rollout stores only the final clean latent x0 and
its reward(s); any sampler can produce it. At update time, fresh noise gives x_t = (1 - t)·x0 + t·eps and

    v+ = beta·v_theta + (1 - beta)·v_old            (implicit positive policy)
    v- = (1 + beta)·v_old - beta·v_theta            (implicit negative policy)
    x0_hat± = x_t - t·v±
    L± = mean((x0_hat± - x0)^2) / stopgrad(mean|x0_hat± - x0|)     (per sample, adaptive weight)
    loss = mean_i( r_i·L+_i + (1 - r_i)·L-_i ) / beta

with the optimality probability r = clip(clip(A, -c, c)/(2c) + 1/2, 0, 1) from the advantage A. The loss is affine in
r: L(r) = mean(L-)/beta + mean(r·(L+ - L-))/beta, which is what MARBLE's amortisation relies on
(:mod:`imgalign.trainers.balance`). The old policy v_old is an exponential moving average of the trained weights
(:class:`EmaParams`), evaluated without gradient.

Integration (one NFT update on a batch of B stored samples x0 [B, C, H, W] with advantages A [B]):

    r = optimality_probability(A, clip=cfg.adv_clip)                      # [B]
    t = sample_nft_times(B, cfg.t_min, cfg.t_max, generator, device)       # [B]
    eps = randn_like(x0); x_t = noisy_latent(x0, t, eps)                   # [B, C, H, W]
    v_theta = model(x_t, t)                                                # with grad
    with torch.no_grad(), ema.applied(trainable_params): v_old = model(x_t, t)
    out = nft_loss(v_theta, v_old, x0, x_t, t, r, beta=cfg.beta)
    loss = out.loss (+ cfg.ref_weight * ref_velocity_loss(v_theta, v_ref, valid)) (+ vnorm penalty)
    loss.backward(); optimizer.step()
    ema.update(trainable_params, decay=ema_decay(step, cfg.ema_decay_ramp, cfg.ema_decay_max))

The trainer's NFT term (:mod:`imgalign.trainers.objectives`) computes the same loss, but draws each sample's t and
eps from a generator seeded by the sample's id (stratified by its place in the micro-batch), so that a sample's
noise does not depend on which processes or micro-batches the batch was split into.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch

from imgalign.config import ConfigError, field


@dataclass
class NFTConfig:
    """DiffusionNFT objective settings (algorithms.md section 4)."""

    beta: float = field(
        1.0, help="NFT guidance strength beta (> 0): v+ = beta*v + (1-beta)*v_old; loss divided by beta."
    )
    adv_clip: float = field(
        1.0, help="c in r = clip(clip(A, -c, c)/(2c) + 1/2, 0, 1): advantage at which r saturates to 0 or 1."
    )
    t_min: float = field(0.0, help="Lowest noise level t sampled for the NFT loss (in [0, 1)).")
    t_max: float = field(1.0, help="Highest noise level t sampled for the NFT loss (in (t_min, 1]).")
    ref_weight: float = field(
        0.0,
        help="Weight of the optional mean((v_theta - v_ref)^2) term toward the frozen base model (0 = off).",
    )
    guidance_scale: float = field(
        1.0,
        help="CFG scale of the velocity the loss trains: 1 trains the conditional velocity (CFG-free, as "
        "DiffusionNFT, which also samples without CFG); set it to sampling.guidance_scale when rollouts and "
        "evaluation sample with CFG, so that the policy trained is the policy sampled (costs 2 forwards).",
    )
    ema_decay_max: float = field(
        0.9, help="Upper bound of the old-policy EMA decay (0 = old policy = current)."
    )
    ema_decay_ramp: float = field(
        0.001,
        help="Old-policy EMA decay at update k is min(ema_decay_max, ema_decay_ramp * k) (DiffusionNFT ramp).",
    )

    def validate(self) -> None:
        # inf passed: adv_clip = inf gave every sample r = 1/2 (the reward never reached the loss), the others NaN
        for name in ("beta", "adv_clip", "ref_weight", "guidance_scale", "ema_decay_ramp"):
            if not math.isfinite(getattr(self, name)):
                raise ConfigError(f"objective.nft.{name} must be finite (got {getattr(self, name)}).")
        if not self.beta > 0:
            raise ConfigError(
                f"objective.nft.beta must be > 0 (got {self.beta}); DiffusionNFT uses beta around 1."
            )
        if not self.adv_clip > 0:
            raise ConfigError(f"objective.nft.adv_clip must be > 0 (got {self.adv_clip}).")
        if not 0.0 <= self.t_min < self.t_max <= 1.0:
            raise ConfigError(
                f"objective.nft.t_min/t_max must satisfy 0 <= t_min < t_max <= 1 (got {self.t_min}, {self.t_max})."
            )
        if not 0.0 <= self.ema_decay_max < 1.0 or self.ema_decay_ramp < 0:
            raise ConfigError(
                "objective.nft.ema_decay_max must be in [0, 1) and objective.nft.ema_decay_ramp >= 0."
            )
        if self.ref_weight < 0:
            raise ConfigError(f"objective.nft.ref_weight must be >= 0 (got {self.ref_weight}).")
        if not self.guidance_scale >= 1.0:
            raise ConfigError(
                f"objective.nft.guidance_scale must be >= 1 (got {self.guidance_scale}); 1 trains the conditional "
                "velocity."
            )


def optimality_probability(advantages: torch.Tensor, clip: float = 1.0) -> torch.Tensor:
    """DiffusionNFT's map from advantage to optimality probability: r = clip(clip(A, -c, c)/(2c) + 1/2, 0, 1).

    advantages: any shape (e.g. [B] or [B, K] for K rewards); returns the same shape in [0, 1].
    """
    if not (math.isfinite(clip) and clip > 0):  # inf made every r 1/2 and nan every r NaN, without a word
        raise ValueError(f"optimality_probability: clip must be a finite number > 0 (got {clip})")
    a = advantages.clamp(-clip, clip)
    return (a / (2.0 * clip) + 0.5).clamp(0.0, 1.0)


def noisy_latent(x0: torch.Tensor, t: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """Flow-matching interpolation x_t = (1 - t)·x0 + t·eps (algorithms.md section 1). x0, noise [B, ...]; t [B]."""
    tb = _bcast(t, x0)
    return (1.0 - tb) * x0 + tb * noise


def sample_nft_times(
    batch: int,
    t_min: float = 0.0,
    t_max: float = 1.0,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
    stratified: bool = True,
) -> torch.Tensor:
    """Noise levels t [batch] in [t_min, t_max]: stratified (one uniform draw per equal-width stratum, shuffled) or iid."""
    u = torch.rand(batch, generator=generator, device="cpu", dtype=torch.float64)
    if stratified:
        perm = torch.randperm(batch, generator=generator, device="cpu")
        u = (perm.to(torch.float64) + u) / batch
    t = t_min + (t_max - t_min) * u
    return t.to(device=device, dtype=torch.float32)


@dataclass
class NFTLossOutput:
    loss: torch.Tensor  # [] scalar, (1/beta)·mean_i(r_i L+_i + (1 - r_i) L-_i)
    loss_plus: torch.Tensor  # [B] L+_i (with graph)
    loss_minus: torch.Tensor  # [B] L-_i (with graph)
    metrics: dict[str, float]


def nft_loss_terms(
    v_theta: torch.Tensor,
    v_old: torch.Tensor,
    x0: torch.Tensor,
    x_t: torch.Tensor,
    t: torch.Tensor,
    beta: float,
    eps: float = 1e-5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample positive and negative NFT losses (L+_i, L-_i), each [B], computed in float32 (or float64).

    v_theta [B, ...] carries the gradient; v_old [B, ...] is treated as a constant (detached). The adaptive weight
    1/stopgrad(mean|x0_hat - x0|) is DiffusionNFT's per-sample normaliser (clamped at `eps`).
    """
    if v_theta.shape != v_old.shape or v_theta.shape != x0.shape or x_t.shape != x0.shape:
        raise ValueError(
            f"nft_loss_terms: v_theta {tuple(v_theta.shape)}, v_old {tuple(v_old.shape)}, x0 {tuple(x0.shape)} and "
            f"x_t {tuple(x_t.shape)} must all have the same shape [B, ...]"
        )
    if t.shape != (x0.shape[0],):
        raise ValueError(f"nft_loss_terms: t must have shape [B]={x0.shape[0]}, got {tuple(t.shape)}")
    dt = torch.promote_types(v_theta.dtype, torch.float32)  # float32, or float64 if given float64
    v = v_theta.to(dt)
    vo = v_old.detach().to(dt)
    x0f, xtf = x0.to(dt), x_t.to(dt)
    tb = _bcast(t.to(dt), x0f)
    v_plus = beta * v + (1.0 - beta) * vo  # [B, ...]
    v_minus = (1.0 + beta) * vo - beta * v  # [B, ...]
    err_plus = xtf - tb * v_plus - x0f  # x0_hat+ - x0
    err_minus = xtf - tb * v_minus - x0f  # x0_hat- - x0
    dims = tuple(range(1, x0.ndim))
    w_plus = err_plus.detach().abs().mean(dim=dims).clamp_min(eps)  # [B]
    w_minus = err_minus.detach().abs().mean(dim=dims).clamp_min(eps)  # [B]
    loss_plus = err_plus.pow(2).mean(dim=dims) / w_plus
    loss_minus = err_minus.pow(2).mean(dim=dims) / w_minus
    return loss_plus, loss_minus


def nft_combine(
    r: torch.Tensor, loss_plus: torch.Tensor, loss_minus: torch.Tensor, beta: float
) -> torch.Tensor:
    """(1/beta)·mean_i(r_i L+_i + (1 - r_i) L-_i): affine in r. r, loss_plus, loss_minus [B]; returns a scalar."""
    if r.shape != loss_plus.shape:
        raise ValueError(
            f"nft_combine: r {tuple(r.shape)} must match the per-sample losses {tuple(loss_plus.shape)}"
        )
    r = r.to(loss_plus.dtype)
    return (r * loss_plus + (1.0 - r) * loss_minus).mean() / beta


def nft_loss(
    v_theta: torch.Tensor,
    v_old: torch.Tensor,
    x0: torch.Tensor,
    x_t: torch.Tensor,
    t: torch.Tensor,
    r: torch.Tensor,
    beta: float,
) -> NFTLossOutput:
    """DiffusionNFT loss (algorithms.md section 4) for one batch. All tensors [B, ...] except t, r [B]."""
    if not beta > 0:
        raise ValueError(f"nft_loss: beta must be > 0 (got {beta})")
    loss_plus, loss_minus = nft_loss_terms(v_theta, v_old, x0, x_t, t, beta)
    loss = nft_combine(r.detach(), loss_plus, loss_minus, beta)
    metrics = {
        "nft/loss": float(loss.detach()),
        "nft/loss_plus": float(loss_plus.detach().mean()),
        "nft/loss_minus": float(loss_minus.detach().mean()),
        "nft/r_mean": float(r.detach().float().mean()),
    }
    return NFTLossOutput(loss=loss, loss_plus=loss_plus, loss_minus=loss_minus, metrics=metrics)


def ref_velocity_loss(
    v_theta: torch.Tensor, v_ref: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """mean((v_theta - v_ref)^2), the optional small pull toward the frozen base model; no gradient into v_ref.

    v_theta, v_ref [B, ...]. With `weights` [B] (the valid-sample mask), the per-sample means are averaged with
    those weights, so that masked samples (zero-std groups, non-finite rewards) are left out as in every other
    term of the loss; all weights 0 gives 0.
    """
    diff = (v_theta.float() - v_ref.detach().float()).flatten(1)  # [B, D]
    if weights is None:
        return diff.pow(2).mean()
    if weights.shape != diff.shape[:1]:
        raise ValueError(
            f"ref_velocity_loss: weights must have shape [B]={diff.shape[0]}, got {tuple(weights.shape)}"
        )
    w = weights.to(diff)
    # masked rows are zeroed before squaring, so that not even their gradient is NaN
    diff = torch.where((w > 0)[:, None], diff, torch.zeros_like(diff))
    return (diff.pow(2).mean(dim=1) * w).sum() / w.sum().clamp_min(1.0)


def ema_decay(update_step: int, ramp: float, max_decay: float) -> float:
    """Old-policy EMA decay at update `update_step`: min(max_decay, ramp·update_step) (0 at the start: v_old = v_theta)."""
    return float(min(max_decay, ramp * max(update_step, 0)))


class EmaParams:
    """Exponential moving average of a list of parameters (the NFT old policy, or evaluation EMA weights).

    ``update(params, decay)``: ema <- decay·ema + (1 - decay)·param. Two ways to evaluate the old policy:

    - ``functional(module, *args, **kwargs)`` (built with :meth:`from_module`, so names are known): one forward with
      the EMA tensors substituted through ``torch.func.functional_call``; the live parameters are untouched, so it
      can run at any point, also after the v_theta forward whose graph is still needed. Preferred.
    - ``applied(params)``: temporarily copies the EMA values into the live parameters. The copy bumps the
      parameters' version counters, so it must run BEFORE the v_theta forward of the same step (otherwise backward
      fails with "modified by an inplace operation").

    Kept in float32 whatever the parameters' dtype.
    """

    def __init__(
        self, params: Iterable[torch.nn.Parameter], decay: float = 0.9, names: list[str] | None = None
    ) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError("EmaParams: got no parameters; pass the trainable parameters of the policy")
        if names is not None and len(names) != len(self.params):
            raise ValueError("EmaParams: give one name per parameter")
        self.names = names
        self.decay = decay
        self.shadow = [p.detach().float().clone() for p in self.params]

    @classmethod
    def from_module(cls, module: torch.nn.Module, decay: float = 0.9) -> EmaParams:
        """EMA of the module's trainable parameters (requires_grad), with their names (for :meth:`functional`)."""
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        return cls([p for _, p in named], decay=decay, names=[n for n, _ in named])

    def functional(self, module: torch.nn.Module, *args: object, **kwargs: object) -> object:
        """module(*args, **kwargs) with the EMA values in place of the tracked parameters (live weights untouched)."""
        if self.names is None:
            raise ValueError(
                "EmaParams.functional needs parameter names: build it with EmaParams.from_module(model)"
            )
        sub = {n: s.to(p.dtype) for n, s, p in zip(self.names, self.shadow, self.params)}
        return torch.func.functional_call(module, sub, args, kwargs, strict=False)

    def _check(self, params: list[torch.nn.Parameter]) -> None:
        if len(params) != len(self.shadow) or any(p.shape != s.shape for p, s in zip(params, self.shadow)):
            raise ValueError("EmaParams: the parameter list does not match the one the EMA was built from")

    @torch.no_grad()
    def update(self, params: Iterable[torch.nn.Parameter] | None = None, decay: float | None = None) -> None:
        ps = self.params if params is None else list(params)
        self._check(ps)
        d = self.decay if decay is None else decay
        if not 0.0 <= d <= 1.0:
            raise ValueError(f"EmaParams.update: decay must be in [0, 1] (got {d})")
        for s, p in zip(self.shadow, ps):
            s.mul_(d).add_(p.detach().float(), alpha=1.0 - d)

    @contextlib.contextmanager
    def applied(self, params: Iterable[torch.nn.Parameter] | None = None) -> Iterator[None]:
        ps = self.params if params is None else list(params)
        self._check(ps)
        backup = [p.detach().clone() for p in ps]
        try:
            with torch.no_grad():
                for p, s in zip(ps, self.shadow):
                    p.copy_(s.to(p.dtype))
            yield
        finally:
            with torch.no_grad():
                for p, b in zip(ps, backup):
                    p.copy_(b)

    def state_dict(self) -> dict[str, object]:
        return {"decay": self.decay, "shadow": [s.clone() for s in self.shadow]}

    def load_state_dict(self, state: dict[str, object]) -> None:
        shadow = state["shadow"]
        if not isinstance(shadow, list) or len(shadow) != len(self.shadow):
            raise ValueError("EmaParams.load_state_dict: saved EMA has a different number of parameters")
        shapes = [tuple(torch.as_tensor(t).shape) for t in shadow]
        bad = [i for i, (sh, p) in enumerate(zip(shapes, self.params)) if sh != tuple(p.shape)]
        if bad:
            i = bad[0]
            name = self.names[i] if self.names else f"parameter {i}"
            raise ValueError(
                f"EmaParams.load_state_dict: saved EMA of {name} has shape {list(shapes[i])}, the model's is "
                f"{list(self.params[i].shape)} ({len(bad)} tensor(s) differ); it was saved from another model"
            )
        self.decay = float(state["decay"])  # type: ignore[arg-type]
        self.shadow = [torch.as_tensor(s).float().to(p.device).clone() for s, p in zip(shadow, self.params)]


def _bcast(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """[B] -> [B, 1, ..., 1] to broadcast against `like` [B, ...]."""
    return t.reshape(t.shape[0], *([1] * (like.ndim - 1))).to(like.dtype)

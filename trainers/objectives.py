"""Training objectives on rollouts.

Objective contract (registered in :data:`imgalign.trainers.registry.OBJECTIVES`): a class built as
``Objective(cfg: ObjectiveConfig, sampling: SamplingConfig)`` with

- ``terms(rollout) -> list[int]``: the loss terms of one sample (GRPO: its trained denoising steps; an x0-based
  objective such as NFT: its fresh-noise draws),
- ``loss(ctx, rollout, idx, term, advantages, valid) -> (loss, metrics)`` for the samples `idx` [b] of the rollout.

Optional for multi-reward balancing (``rewards.balancer: marble`` and ``rewards.diagnose_cosines``):
``head(ctx, rollout, idx, term, valid) -> LossHead``, one forward that can be turned into a loss for several
advantage vectors (each reward's own, or their mix) without another forward; ``loss`` is then
``head.total(head.to_signal(advantages[idx]))``.

Optional flag ``masks_invalid = True``: every term of the loss (policy, KL, penalty) is a mean weighted by ``valid``,
so a sample with ``valid`` False (a tied group, a non-finite reward) contributes neither loss nor gradient; the
trainer then leaves those samples out of the update's forwards instead of computing zeros (flat rollouts).

Optional attribute ``needs_reference`` (default False): True when ``loss`` reads the frozen reference's output
(KL, velocity penalty), so that a full fine-tune keeps a frozen copy of the model.

Optional hooks: ``after_update(params)`` after every optimizer step (e.g. NFT's EMA old policy), and
``state_dict()`` / ``load_state_dict(state)`` for objective state that checkpoints must carry (tensors and plain
Python values only: it is loaded with ``weights_only=True``).

An objective only ever sees one micro-batch, and its ``loss`` is a mean over that micro-batch's valid samples
(weighted by ``valid``). The trainer averages over terms and weights each micro-batch by its share of the update's
valid samples on every process, so an update is the mean over all valid samples however they fall into micro-batches.
A velocity penalty (``objective.penalty``, e.g. the velocity-norm hinge) composes with any objective that produces
(v_θ, v_ref): :func:`add_penalty` adds λ·mean(penalty(v_θ, v_ref)).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from imgalign.adapters import FlowAdapter
from imgalign.plugins import call_plugin
from imgalign.trainers import kernels as K
from imgalign.trainers.config import ObjectiveConfig, SamplingConfig
from imgalign.trainers.grpo import grpo_clipped_loss
from imgalign.trainers.registry import OBJECTIVES, PENALTIES, call_problem
from imgalign.trainers.rollout import Rollout, step_kernel
from imgalign.trainers.vnorm import sigma_bucket, step_bucket


@dataclass
class TrainContext:
    adapter: FlowAdapter
    model: torch.nn.Module  # the (possibly DDP-wrapped) transformer with gradients
    step: int
    seed: int = 0  # train.seed: objectives that draw their own noise (NFT) mix it in


@dataclass
class LossHead:
    """One micro-batch's forward, reusable for several advantage vectors (multi-reward balancing).

    ``to_signal`` maps advantages [b] or [b, K] elementwise to the per-sample learning signal the loss is affine in
    (GRPO: the advantage itself; NFT: the optimality probability r); ``policy(signal [b]) -> (loss, metrics)`` is
    the reward-driven part; ``extra`` the reward-independent terms (KL, reference, velocity penalty; scalar, 0 when
    none). ``output`` is the network output v_theta [b, ...] (graph kept): the output-space gradient probe.
    """

    output: torch.Tensor
    to_signal: Callable[[torch.Tensor], torch.Tensor]
    policy: Callable[[torch.Tensor], tuple[torch.Tensor, dict[str, Any]]]
    extra: torch.Tensor
    metrics: dict[str, Any]

    def total(self, signal: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        """The full loss for per-sample signal [b]: policy(signal) + extra, with every metric."""
        loss, m = self.policy(signal)
        return loss + self.extra, {**m, **self.metrics}


def _masked_mean(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Mean of x weighted by w; entries with weight 0 are left out, also when they are NaN (NaN·0 is NaN)."""
    return (torch.where(w > 0, x, torch.zeros_like(x)) * w).sum() / w.sum().clamp_min(1.0)


def add_penalty(
    cfg: ObjectiveConfig,
    loss: torch.Tensor,
    v: torch.Tensor,
    v_ref: torch.Tensor,
    w: torch.Tensor,
    metrics: dict,
    buckets: list[str] | None = None,
) -> torch.Tensor:
    """loss + λ·mean_b(penalty(v_θ, v_ref)); logs the penalty and the norm ratio ‖v_θ‖/‖v_ref‖ (overall, and per
    step bucket early/middle/late when `buckets` [b] names each row's bucket: ``vnorm/norm_ratio/<bucket>``)."""
    from imgalign.trainers.vnorm import bucket_means, norm_ratio

    with torch.no_grad():
        ratio = norm_ratio(v, v_ref)  # [b], in float32 (a bf16 model's norms were bf16: off by up to ~0.4%)
        metrics["policy/vnorm_ratio"] = float(_masked_mean(ratio, w.float()))
        if buckets is not None:
            metrics.update(bucket_means(ratio, buckets, valid=w > 0))
    if cfg.penalty_weight <= 0:
        return loss
    fn = PENALTIES.get(cfg.penalty)
    pen = call_plugin(f"objective.penalty {cfg.penalty!r}", cfg.penalty, fn, v, v_ref.detach())
    # not one value per sample: a size-mismatch traceback in the masked mean
    if not isinstance(pen, torch.Tensor) or pen.numel() not in (1, v.shape[0]):
        shape = tuple(pen.shape) if isinstance(pen, torch.Tensor) else type(pen).__name__
        raise ValueError(
            f"objective.penalty {cfg.penalty!r} returned {shape} for {v.shape[0]} samples: a velocity penalty "
            "returns one value per sample, a tensor of shape [b] (reduce the other dimensions, e.g. "
            ".flatten(1).mean(1))"
        )
    # a constant (a NaN, say) added nothing to the gradient: the run trained unpenalised, logging policy/penalty=nan
    if v.requires_grad and not pen.requires_grad:
        raise ValueError(
            f"objective.penalty {cfg.penalty!r} returned a tensor without a graph (requires_grad is False), so it "
            "cannot change the weights: compute it from v_theta (its first argument), not under torch.no_grad(), "
            "from detached tensors or as a constant"
        )
    pen = pen.reshape(-1)
    # a plug-in's NaN/inf penalty of finite velocities: every update was skipped for a non-finite gradient, the run
    # ended "done" and the warning named the rollout, the rewards, the objective or the penalty alike. (A built-in's
    # of velocities so large that their norm overflows is the policy diverging, which the skipped update names.)
    if ":" in cfg.penalty:
        inputs_ok = torch.isfinite(v.detach().flatten(1)).all(1) & torch.isfinite(
            v_ref.detach().flatten(1)
        ).all(1)
        bad = (w > 0) & inputs_ok & ~torch.isfinite(pen.detach().expand(v.shape[0]))
        if bad.any():
            raise ValueError(
                f"objective.penalty {cfg.penalty!r} returned {int(bad.sum())} non-finite value(s) (NaN/inf) for "
                "samples whose velocities are finite; a velocity penalty returns a finite value per sample: fix it "
                "there"
            )
    metrics["policy/penalty"] = float(_masked_mean(pen.detach(), w))
    return loss + cfg.penalty_weight * _masked_mean(pen, w)


OBJECTIVE_CONTRACT = (
    "an objective is a class built as Objective(cfg, sampling) with the methods terms(rollout) and "
    "loss(ctx, rollout, idx, term, advantages, valid) -> (loss, metrics); see imgalign.trainers.objectives"
)


def build_objective(name: str, cfg: ObjectiveConfig, sampling: SamplingConfig) -> Any:
    """The objective `name` (registered, or the user's ``package.module:attr``) built as ``Objective(cfg,
    sampling)``. One that cannot be called that way (a function of other arguments, an instance) or that lacks
    ``terms`` / ``loss`` is a ValueError naming it and the contract; the trainer builds it before any model
    loads (was: a TypeError or AttributeError traceback, the latter after the model had loaded)."""
    factory = OBJECTIVES.get(name)
    if not callable(factory):
        raise ValueError(
            f"objective {name!r} is of type {type(factory).__name__}, not a class: {OBJECTIVE_CONTRACT}"
        )
    problem = call_problem(factory, 2)
    if problem:
        raise ValueError(
            f"objective {name!r} cannot be built as {name}(cfg, sampling): {problem}; {OBJECTIVE_CONTRACT}"
        )
    objective = call_plugin(f"objective {name!r}", name, factory, cfg, sampling)
    missing = [m for m in ("terms", "loss") if not callable(getattr(objective, m, None))]
    if missing:
        raise ValueError(
            f"objective {name!r} built a {type(objective).__name__} without the method(s) {', '.join(missing)}: "
            f"{OBJECTIVE_CONTRACT}"
        )
    return objective


def check_loss(name: str, out: Any) -> tuple[torch.Tensor, dict[str, float]]:
    """An objective's ``loss(...)`` result as the trainer needs it: (a scalar tensor with a graph, a dict of numbers);
    anything else is a ValueError naming the objective and what it returned (was: a traceback from backward(), or
    from the metric sums). Metric values that are one-element tensors are read as numbers."""
    if not (isinstance(out, tuple) and len(out) == 2):
        raise ValueError(
            f"objective {name!r}: loss(...) returned a {type(out).__name__}; it must return (loss, metrics): a "
            "scalar tensor and a dict of numbers"
        )
    loss, metrics = out
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        got = (
            f"a tensor of shape {tuple(loss.shape)}"
            if isinstance(loss, torch.Tensor)
            else type(loss).__name__
        )
        raise ValueError(
            f"objective {name!r}: loss(...) returned the loss as {got}; it must be a scalar tensor, the mean over "
            "the micro-batch's valid samples"
        )
    if not loss.requires_grad:
        raise ValueError(
            f"objective {name!r}: loss(...) returned a loss without a graph (requires_grad is False); compute it "
            "from ctx.model's output, not under torch.no_grad() or from detached tensors"
        )
    if not isinstance(metrics, dict):
        raise ValueError(
            f"objective {name!r}: loss(...) returned metrics as a {type(metrics).__name__}, not a dict"
        )
    numbers: dict[str, float] = {}
    for key, val in metrics.items():
        if isinstance(val, torch.Tensor) and val.numel() == 1:
            val = float(val)
        if isinstance(val, bool) or not isinstance(val, (int, float)):
            raise ValueError(
                f"objective {name!r}: loss(...) returned metric {key!r} as a {type(val).__name__}; metrics must be "
                "numbers (means over the micro-batch's valid samples)"
            )
        numbers[key] = float(val)
    return loss, numbers


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


def anchor_step(train_steps: list[int], num_steps: int, step: int) -> int | None:
    """The untrained step anchored at training step `step`: the steps outside `train_steps` (the last one, whose
    σ' = 0 gives no density, excluded) taken in turn; None when every step is trained."""
    trained = set(train_steps)
    untrained = [k for k in range(num_steps - 1) if k not in trained]
    return untrained[step % len(untrained)] if untrained else None


@OBJECTIVES.register("grpo")
class GRPOObjective:
    """Flow-GRPO (Liu et al. 2025, eq. 4-6): clipped surrogate on each trained SDE transition, plus β·KL to the
    frozen base in closed form with the step's actual variance (algorithms.md §2)."""

    needs_reference = False
    masks_invalid = True  # policy, KL and penalty are all weighted by `valid` (see the module docstring)

    def __init__(self, cfg: ObjectiveConfig, sampling: SamplingConfig) -> None:
        self.cfg, self.sampling = cfg, sampling
        self.needs_reference = (
            cfg.kl_beta > 0 or cfg.penalty_weight > 0 or cfg.vnorm_log or cfg.anchor_beta > 0
        )

    def terms(self, rollout: Rollout) -> list[int]:
        if "tree" in rollout.extras:  # tree rollouts: one term, every parent row carries its own branch step
            return [0]
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
        if "tree" in rollout.extras:  # per-edge credit on parent rows (issue 6)
            return self._tree_loss(ctx, rollout.extras["tree"], idx, advantages, valid)
        h = self.head(ctx, rollout, idx, term, valid)
        return h.total(h.to_signal(advantages[idx].to(h.output.device)))

    def _step(
        self, x: torch.Tensor, vel: torch.Tensor, sig: torch.Tensor, i: int, prev: torch.Tensor
    ) -> K.StepOutput:
        """The configured kernel's transition i -> i+1 from x under velocity `vel`, evaluated at `prev`."""
        s = self.sampling
        return step_kernel(
            s.kernel,
            x,
            vel,
            sig,
            i,
            s.noise_level,
            prev_sample=prev,
            reduce=self.cfg.logprob_reduce,
            block=s.noise_block,
        )

    def head(
        self, ctx: TrainContext, rollout: Rollout, idx: torch.Tensor, term: int, valid: torch.Tensor
    ) -> LossHead:
        """The forward on trained step `term` of samples `idx`; the surrogate for any advantage vector. The loss is
        linear in the advantage wherever the ratio is inside the clip range (always on-policy, ratio = 1)."""
        s, c = self.sampling, self.cfg
        a = ctx.adapter
        i = term
        dev = a.device
        x_t = rollout.latents[idx, i].to(dev)  # [b, ...]
        x_next = rollout.latents[idx, i + 1].to(dev)
        sig = rollout.sigmas.to(dev)
        cond = rollout.cond.index(idx)

        def transition(vel: torch.Tensor) -> Any:  # the stored transition i -> i+1 under velocity `vel`
            return self._step(x_t, vel, sig, i, x_next)

        v = a.velocity(x_t, sig[i], cond, s.guidance_scale, transformer=ctx.model)
        out = transition(v)
        w = valid[idx].float().to(dev)
        if rollout.train_mask is not None:
            w = w * rollout.train_mask[idx, i].float().to(dev)
        old_lp = rollout.log_probs[idx, i].to(dev)

        step_w = 1.0
        if c.step_weight == "velocity":
            sig_list = [float(x) for x in rollout.sigmas]
            step_w = K.velocity_step_weights(s.kernel, sig_list, list(rollout.train_steps), s.noise_level)[i]

        def policy(adv: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
            sur = grpo_clipped_loss(out.log_prob, old_lp, adv, c.clip_range, w)
            return step_w * sur.loss, {
                "policy/loss": float(sur.loss.detach()),
                "policy/approx_kl": float(sur.approx_kl),
                "policy/clipfrac": float(sur.clipfrac),
                "policy/ratio_mean": float(_masked_mean(sur.ratio, w)) if bool((w > 0).any()) else 1.0,
                "policy/ratio_min": float(sur.ratio[w > 0].min()) if bool((w > 0).any()) else 1.0,
                "policy/ratio_max": float(sur.ratio[w > 0].max()) if bool((w > 0).any()) else 1.0,
            }

        metrics: dict[str, Any] = {"policy/logprob": float(_masked_mean(out.log_prob.detach(), w))}
        extra = torch.zeros((), device=dev)
        if self.needs_reference:
            with torch.no_grad(), a.reference() as ref:
                v_ref = a.velocity(x_t, sig[i], cond, s.guidance_scale, transformer=ref)
                ref_out = transition(v_ref)
            kl = K.gaussian_kl_equal_std(
                out.mean, ref_out.mean, out.std, c.logprob_reduce, s.noise_block
            )  # [b]
            metrics["policy/kl"] = float(_masked_mean(kl.detach(), w))
            if c.kl_beta > 0:
                extra = extra + c.kl_beta * _masked_mean(kl, w)
            extra = add_penalty(c, extra, v, v_ref, w, metrics, [step_bucket(i, s.num_steps)] * len(idx))
        if c.anchor_beta > 0 and i == rollout.train_steps[0]:
            j = anchor_step(rollout.train_steps, s.num_steps, ctx.step)
            if j is not None:
                # the trainer averages the terms (trained steps): this one carries the anchor for all of them
                n = len(rollout.train_steps)
                extra = extra + n * c.anchor_beta * self._anchor_kl(ctx, rollout, idx, j, w, metrics)
        return LossHead(v, lambda adv: adv.float(), policy, extra, metrics)

    def _anchor_kl(
        self, ctx: TrainContext, rollout: Rollout, idx: torch.Tensor, j: int, w: torch.Tensor, metrics: dict
    ) -> torch.Tensor:
        """Masked mean over samples `idx` of KL(π_θ ‖ π_ref) at untrained step j, the step taken as an SDE step."""
        s, c, a = self.sampling, self.cfg, ctx.adapter
        x_j = rollout.latents[idx, j].to(a.device)
        sig = rollout.sigmas.to(a.device)
        cond = rollout.cond.index(idx)

        def mean_std(vel: torch.Tensor) -> K.StepOutput:  # μ and std only: the log-density of x_j is unused
            return self._step(x_j, vel, sig, j, x_j)

        out = mean_std(a.velocity(x_j, sig[j], cond, s.guidance_scale, transformer=ctx.model))
        with torch.no_grad(), a.reference() as ref:
            ref_out = mean_std(a.velocity(x_j, sig[j], cond, s.guidance_scale, transformer=ref))
        kl = K.gaussian_kl_equal_std(out.mean, ref_out.mean, out.std, c.logprob_reduce, s.noise_block)  # [b]
        metrics["policy/anchor_kl"] = float(_masked_mean(kl.detach(), w))
        return _masked_mean(kl, w)

    # ---- tree rollouts (issue 6): rows are parents, v_θ once per row, the clipped surrogate on every child edge
    def _tree_loss(
        self,
        ctx: TrainContext,
        rows: Any,
        idx: torch.Tensor,
        advantages: torch.Tensor,
        valid: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """GRPO on the branching edges of the parent rows `idx` [b] (:class:`imgalign.trainers.rollout.TreeRows`):
        advantages, valid [M, k] per child edge; each child's log-density under the std it was sampled with."""
        from imgalign.trainers.rollout import kernel_mean_std

        s, c, a = self.sampling, self.cfg, ctx.adapter
        dev = a.device
        x = rows.x[idx].to(dev)  # [b, ...]
        sig, sig_n = rows.sigma[idx].to(dev), rows.sigma_next[idx].to(dev)  # [b]
        std = rows.std[idx].to(dev)  # [b]
        cond = rows.cond.index(idx.to(rows.cond.embeds.device))
        kids = rows.children[idx].to(dev)  # [b, k, ...]
        b, k = kids.shape[:2]
        v = a.velocity(x, sig, cond, s.guidance_scale, transformer=ctx.model)  # [b, ...], once per parent
        mean, _ = kernel_mean_std(s.kernel, x, v, sig, sig_n, s.noise_level, rows.sigma_next_of_one)
        lp = K.gaussian_log_prob(
            kids.flatten(0, 1), mean.repeat_interleave(k, 0), std.repeat_interleave(k), c.logprob_reduce
        ).view(b, k)  # [b, k]
        w = (valid[idx] & rows.child_mask[idx]).float().to(dev)  # [b, k]
        sur = grpo_clipped_loss(
            lp.flatten(),
            rows.old_log_prob[idx].to(dev).flatten(),
            advantages[idx].to(dev).flatten(),
            c.clip_range,
            w.flatten(),
        )
        loss = sur.loss
        wf = w.flatten()
        metrics: dict[str, Any] = {
            "policy/loss": float(sur.loss.detach()),
            "policy/approx_kl": float(sur.approx_kl),
            "policy/clipfrac": float(sur.clipfrac),
            "policy/ratio_mean": float(_masked_mean(sur.ratio, wf)) if bool((wf > 0).any()) else 1.0,
            "policy/ratio_min": float(sur.ratio[wf > 0].min()) if bool((wf > 0).any()) else 1.0,
            "policy/ratio_max": float(sur.ratio[wf > 0].max()) if bool((wf > 0).any()) else 1.0,
            "policy/logprob": float(_masked_mean(lp.detach().flatten(), wf)),
        }
        if self.needs_reference:
            w_row = (w.sum(1) > 0).float()  # [b] a parent row counts when any of its edges trains
            with torch.no_grad(), a.reference() as ref:
                v_ref = a.velocity(x, sig, cond, s.guidance_scale, transformer=ref)
                ref_mean, _ = kernel_mean_std(
                    s.kernel, x, v_ref, sig, sig_n, s.noise_level, rows.sigma_next_of_one
                )
            kl = K.gaussian_kl_equal_std(mean, ref_mean, std, c.logprob_reduce)  # [b]
            metrics["policy/kl"] = float(_masked_mean(kl.detach(), w_row))
            if c.kl_beta > 0:
                loss = loss + c.kl_beta * _masked_mean(kl, w_row)
            buckets = [step_bucket(int(i), rows.num_steps) for i in rows.step[idx].tolist()]
            loss = add_penalty(c, loss, v, v_ref, w_row, metrics, buckets)
        return loss, metrics


@OBJECTIVES.register("nft")
class NFTObjective:
    """DiffusionNFT (algorithms.md §4; :mod:`imgalign.trainers.nft`) on the same rollouts: only the final x0 and
    the advantages are used; each stored sample gets ``terms_per_sample`` fresh (t, ε) draws per update; the old
    policy is an EMA of the trained weights updated after every optimizer step. The loss is computed on the
    velocity at ``objective.nft.guidance_scale``: 1 (default) is the conditional velocity, as DiffusionNFT trains
    CFG-free; rollouts sampled with CFG w > 1 should train at w too, otherwise the samples come from one policy and
    the update shapes another. Samples whose advantage is invalid (tied group, non-finite reward) are masked out."""

    def __init__(self, cfg: ObjectiveConfig, sampling: SamplingConfig) -> None:
        self.cfg, self.sampling = cfg, sampling
        if sampling.guidance_scale != cfg.nft.guidance_scale:
            logging.getLogger(__name__).warning(
                "objective nft trains the velocity at CFG %g but rollouts sample at CFG %g: the update shapes a "
                "different policy from the one sampled; set objective.nft.guidance_scale=%g (or sample with %g)",
                cfg.nft.guidance_scale,
                sampling.guidance_scale,
                sampling.guidance_scale,
                cfg.nft.guidance_scale,
            )
        self.needs_reference = cfg.nft.ref_weight > 0 or cfg.penalty_weight > 0 or cfg.vnorm_log
        self.old = None  # EmaParams of the trainable weights, built at the first loss
        self.updates = 0
        self._pending_state: dict[str, Any] | None = None

    def terms(self, rollout: Rollout) -> list[int]:
        return list(range(self.cfg.terms_per_sample))

    def _ensure_old(self, params: list[torch.nn.Parameter]) -> None:
        from imgalign.trainers.nft import EmaParams

        if self.old is None:
            self.old = EmaParams(params, decay=0.0)
            if self._pending_state is not None:
                self.old.load_state_dict(self._pending_state["old"])
                self._pending_state = None

    def loss(
        self,
        ctx: TrainContext,
        rollout: Rollout,
        idx: torch.Tensor,
        term: int,
        advantages: torch.Tensor,
        valid: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        h = self.head(ctx, rollout, idx, term, valid)
        return h.total(h.to_signal(advantages[idx].to(h.output.device)))

    def head(
        self, ctx: TrainContext, rollout: Rollout, idx: torch.Tensor, term: int, valid: torch.Tensor
    ) -> LossHead:
        """The forward on fresh-noise draw `term` of samples `idx`; the NFT loss is affine in the optimality
        probability r (the signal), which MARBLE mixes across rewards (:mod:`imgalign.trainers.balance`)."""
        from imgalign.trainers.nft import (
            nft_loss_terms,
            noisy_latent,
            optimality_probability,
            ref_velocity_loss,
        )
        from imgalign.trainers.prompting import _mix

        c, n = self.cfg, self.cfg.nft
        a = ctx.adapter
        dev = a.device
        params = [p for _, p in a.trainable_named_parameters()]
        self._ensure_old(params)
        x0 = rollout.latents[idx, -1].to(dev)  # [b, ...]
        b = x0.shape[0]
        ids = rollout.sample_ids[idx]
        gens = [torch.Generator().manual_seed(_mix(ctx.seed, ctx.step, term, int(i), 4242)) for i in ids]
        # t per sample: stratified over [t_min, t_max] by the sample's position in the micro-batch
        u = torch.stack([torch.rand((), generator=g, dtype=torch.float64) for g in gens])
        t = (n.t_min + (n.t_max - n.t_min) * (torch.arange(b, dtype=torch.float64) + u) / b).float().to(dev)
        eps = torch.stack([torch.randn(x0.shape[1:], generator=g) for g in gens]).to(dev)
        x_t = noisy_latent(x0, t, eps)
        cond = rollout.cond.index(idx)
        assert self.old is not None
        w_cfg = n.guidance_scale
        with torch.no_grad(), self.old.applied(params):  # before the v_θ forward (version counters)
            v_old = a.velocity(x_t, t, cond, w_cfg, transformer=ctx.model)
        v = a.velocity(x_t, t, cond, w_cfg, transformer=ctx.model)
        lp, lm = nft_loss_terms(v, v_old, x0, x_t, t, n.beta)
        w = valid[idx].float().to(dev)

        def policy(r: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
            loss = _masked_mean(r * lp + (1 - r) * lm, w) / n.beta
            return loss, {"policy/loss": float(loss.detach()), "nft/r_mean": float(_masked_mean(r, w))}

        metrics: dict[str, Any] = {
            "nft/loss_plus": float(_masked_mean(lp.detach(), w)),
            "nft/loss_minus": float(_masked_mean(lm.detach(), w)),
        }
        extra = torch.zeros((), device=dev)
        if self.needs_reference:
            with torch.no_grad(), a.reference() as ref:
                v_ref = a.velocity(x_t, t, cond, w_cfg, transformer=ref)
            if n.ref_weight > 0:
                extra = extra + n.ref_weight * ref_velocity_loss(v, v_ref, w)
            extra = add_penalty(c, extra, v, v_ref, w, metrics, [sigma_bucket(float(x)) for x in t.tolist()])
        return LossHead(v, lambda adv: optimality_probability(adv, clip=n.adv_clip), policy, extra, metrics)

    def after_update(self, params: list[torch.nn.Parameter]) -> None:
        from imgalign.trainers.nft import ema_decay

        self._ensure_old(params)
        self.updates += 1
        assert self.old is not None
        self.old.update(
            params, decay=ema_decay(self.updates, self.cfg.nft.ema_decay_ramp, self.cfg.nft.ema_decay_max)
        )

    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"updates": self.updates}
        if self.old is not None:
            out["old"] = self.old.state_dict()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.updates = int(state["updates"])
        if "old" in state:
            if self.old is not None:
                self.old.load_state_dict(state["old"])
            else:
                self._pending_state = state

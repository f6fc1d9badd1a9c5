"""Rollouts: sample G images per prompt with the current policy and keep what training needs.

Rollout strategy contract (registered in :data:`imgalign.trainers.registry.ROLLOUTS`)::

    strategy(ctx: RolloutContext, prompts [B], metadata [B], sample_ids [B], group_ids [B]) -> Rollout

Rows are samples for flat rollouts; a strategy may instead return other trainable units (e.g. tree edges) as rows,
with ``train_mask`` saying which step each row trains and ``extras["credit"]`` computing their advantages.
The ``tree`` strategy scores its leaves (``prompts``/``images`` are the G leaves of each prompt, in the flat order)
but trains ``train_rows`` parent rows, described by :class:`TreeRows` in ``extras["tree"]``.

Every sample's randomness (initial noise and every SDE step's noise) comes from its own generator seeded by
(seed, step, global sample index): samples differ on every process, and the result does not depend on how samples
are split over processes or forward batches, which is what makes multi-process runs and resumes reproducible. With
``sampling.shared_init_noise`` the initial noise comes instead from a generator seeded by (seed, step, global group
index), so a prompt's G images share it wherever they are sampled, and the SDE noise stays per sample. With
``sampling.antithetic`` the odd member of each pair (2k, 2k + 1) within a group draws from its partner's generator
and flips the sign, so the pair's noises are exact mirrors (also across processes).
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
    # rows the update iterates over when they are not the scored samples (tree rollouts: parent rows); None = B
    train_rows: int | None = None

    @property
    def x0(self) -> torch.Tensor:
        return self.latents[:, -1]

    @property
    def num_rows(self) -> int:
        """Trainable rows of the update: the samples (flat), or e.g. a tree rollout's parent rows."""
        return len(self.prompts) if self.train_rows is None else self.train_rows


def check_rollout(name: str, ro: Any, n: int) -> Rollout:
    """A strategy's result for `n` prompts: a :class:`Rollout` with `n` images [n, 3, H, W]; anything else (a
    plug-in returning None, a tuple, a batch of another size) was an AttributeError or a shape traceback later in
    the step. Raises a ValueError naming sampling.rollout `name`; returns `ro`."""
    if not isinstance(ro, Rollout):
        raise ValueError(
            f"sampling.rollout {name!r} returned a {type(ro).__name__}, not a Rollout "
            "(imgalign.trainers.rollout.Rollout; see that module's docstring for the contract)"
        )
    images = getattr(ro, "images", None)
    if (
        not isinstance(images, torch.Tensor)
        or images.ndim != 4
        or images.shape[0] != n
        or len(ro.prompts) != n
    ):
        shape = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
        raise ValueError(
            f"sampling.rollout {name!r} returned images {shape} and {len(ro.prompts)} prompts for {n} prompts: a "
            f"Rollout holds one image per prompt, images [{n}, 3, H, W] in [0, 1]"
        )
    return ro


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
    block: int = 1,
) -> K.StepOutput:
    """Dispatch one stochastic transition i -> i+1 to the configured kernel (``block``: sampling.noise_block)."""
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
            block,
        )
    if kernel == "cps":
        return K.cps_step(x, v, sigmas[i], sigmas[i + 1], noise_level, noise, prev_sample, reduce)  # type: ignore[arg-type]
    raise ValueError(f"unknown kernel {kernel!r}; valid: sde, cps")


def trained_steps(cfg: SamplingConfig, seed: int, step: int) -> list[int]:
    """The SDE (trained) steps of a training step: the same on every process."""
    rng = random.Random(_mix(seed, step, 17))
    max_start = cfg.sde_window_max_start if cfg.sde_window_max_start >= 0 else None
    return K.sde_window(cfg.num_steps, cfg.sde_window or None, rng, max_start)


def group_initial_noise(ctx: RolloutContext, group_ids: torch.Tensor) -> torch.Tensor:
    """One initial noise per prompt group, [B, ...] (rows of a group are equal), for ``shared_init_noise``.
    Seeded by (seed, step, -1, group): apart from the per-sample seeds, and the same on every process."""
    groups, row_group = torch.unique(group_ids, return_inverse=True)  # [U], [B]
    gens = [torch.Generator().manual_seed(_mix(ctx.seed, ctx.step, -1, int(g))) for g in groups]
    noise = ctx.adapter.init_noise(gens)  # [U, ...] drawn once per group
    return noise[row_group.to(noise.device)]


def noise_partners(
    sample_ids: torch.Tensor, group_size: int, antithetic: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The sample whose generator each sample draws its noise from, and the sign it applies: [B] ids, [B] ±1.

    Antithetic pairs are (2k, 2k + 1) within a group (global ids, so a pair split over processes still mirrors):
    the odd member uses its partner's generator with the sign flipped. Each image is still a sample of the policy
    (ε and −ε are equally likely), and a pair's reward difference isolates the odd part of the reward's response to
    the noise, the part the policy gradient A·∇log p can use (mirrored sampling, as in evolution strategies)."""
    if not antithetic:
        return sample_ids, torch.ones(len(sample_ids))
    odd = (sample_ids % group_size) % 2 == 1  # [B]
    return sample_ids - odd.long(), 1.0 - 2.0 * odd.float()


@torch.no_grad()
def sample_trajectories(
    ctx: RolloutContext,
    cond: Cond,
    sample_ids: torch.Tensor,
    train_steps: list[int],
    group_ids: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Run the sampler for a batch: SDE transitions at `train_steps`, Euler ODE elsewhere. `group_ids` [B] gives
    the initial noise with ``sampling.shared_init_noise``. Returns latents [B, S + 1, ...], log_probs [B, S] and the
    NFEs spent."""
    a, cfg = ctx.adapter, ctx.cfg
    seed_ids, signs = noise_partners(sample_ids, cfg.group_size, cfg.antithetic)
    gens = [torch.Generator().manual_seed(_mix(ctx.seed, ctx.step, int(i))) for i in seed_ids]
    x = group_initial_noise(ctx, group_ids) if cfg.shared_init_noise else a.init_noise(gens)
    sign = signs.to(x.device).view(-1, *([1] * (x.dim() - 1)))  # [B, 1, ...] float32
    if cfg.antithetic and not cfg.shared_init_noise:
        x = x * sign.to(x.dtype)
    sig = a.sigmas(cfg.num_steps).to(x.device)
    traj = [x.float()]
    lps = torch.zeros(x.shape[0], cfg.num_steps, dtype=torch.float64)  # float64 sums (kernels.reduce_dims)
    trained = set(train_steps)
    for i in range(cfg.num_steps):
        v = a.velocity(x, sig[i], cond, cfg.guidance_scale, transformer=ctx.model)
        if i in trained:
            noise = torch.stack([torch.randn(x.shape[1:], generator=g) for g in gens]).to(x.device)
            if cfg.antithetic:
                noise = noise * sign
            out = step_kernel(
                cfg.kernel,
                x,
                v,
                sig,
                i,
                cfg.noise_level,
                noise=noise,
                reduce=ctx.logprob_reduce,
                block=cfg.noise_block,
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
    """Flow-GRPO rollouts: every sample is an independent trajectory from its own noise (G per prompt), or, with
    ``sampling.shared_init_noise``, the G trajectories of a prompt start from one noise and differ by SDE noise."""
    a, cfg = ctx.adapter, ctx.cfg
    train_steps = trained_steps(cfg, ctx.seed, ctx.step)
    lat, lps, imgs, nfe = [], [], [], 0
    conds = []
    for s in range(0, len(prompts), cfg.batch_size):
        sl = slice(s, s + cfg.batch_size)
        cond = a.encode(prompts[sl])
        traj, lp, n = sample_trajectories(ctx, cond, sample_ids[sl], train_steps, group_ids[sl])
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


# ---- tree rollouts (TreeGRPO / BranchGRPO; algorithms.md section 3; math in imgalign.trainers.tree) ---------------


def kernel_mean_std(
    kernel: str,
    x: torch.Tensor,
    v: torch.Tensor,
    sigma: torch.Tensor,
    sigma_next: torch.Tensor,
    noise_level: float,
    sigma_next_of_one: torch.Tensor | float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean [N, ...] and std [N] of the configured stochastic step with per-row noise levels sigma, sigma_next [N]
    (the same formulas the flat rollout samples and trains with)."""
    if kernel == "sde":
        return K.flow_sde_mean_std(x, v, sigma, sigma_next, noise_level, sigma_next_of_one)
    if kernel == "cps":
        return K.cps_mean_std(x, v, sigma, sigma_next, noise_level)
    raise ValueError(f"unknown kernel {kernel!r}; valid: sde, cps")


@dataclass
class TreeRows:
    """What the update needs of a tree rollout, one row per parent (a node at a branch step): v_theta is evaluated
    once per row and shared by its k children (siblings share x, sigma and conditioning).

    k = the largest branching factor; rows with fewer children are padded (child_mask False)."""

    x: torch.Tensor  # [M, ...] latent at which the parent's velocity was evaluated
    sigma: torch.Tensor  # [M]
    sigma_next: torch.Tensor  # [M]
    step: torch.Tensor  # [M] sampling-step index of the branch
    std: torch.Tensor  # [M] the std actually used to sample the children
    cond: Cond  # [M] conditioning of the row's prompt
    children: torch.Tensor  # [M, k, ...] the sampled children x_{i+1}
    child_mask: torch.Tensor  # [M, k] bool
    old_log_prob: torch.Tensor  # [M, k] behaviour log-densities (objective.logprob_reduce), 0 where padded
    edge_index: torch.Tensor  # [M, k] index of each child's edge in the TreeRollout (-1 where padded)
    sigma_next_of_one: float  # the schedule's sigmas[1] (the SDE's sigma = 1 guard)
    num_steps: int


def _tree_rows(
    roll: Any, cond: Cond, sigmas: torch.Tensor, num_steps: int, reduce: str
) -> tuple[TreeRows, torch.Tensor]:
    """Parent-row layout of a :class:`imgalign.trainers.tree.TreeRollout`; also returns each edge's slot [E]."""
    m, e = roll.parent_x.shape[0], roll.edge_child.shape[0]
    first = torch.full((m,), e, dtype=torch.long, device=roll.edge_parent.device)
    first = first.scatter_reduce(0, roll.edge_parent, torch.arange(e, device=first.device), reduce="amin")
    slot = torch.arange(e, device=first.device) - first[roll.edge_parent]  # [E] position among siblings
    k = int(slot.max()) + 1
    children = roll.edge_x_next.new_zeros((m, k, *roll.edge_x_next.shape[1:]))
    children[roll.edge_parent, slot] = roll.edge_x_next
    mask = torch.zeros(m, k, dtype=torch.bool, device=first.device)
    mask[roll.edge_parent, slot] = True
    edge_index = torch.full((m, k), -1, dtype=torch.long, device=first.device)
    edge_index[roll.edge_parent, slot] = torch.arange(e, device=first.device)
    # the behaviour log-density recomputed exactly as the loss computes it (same reduction, same mean and std)
    lp = K.gaussian_log_prob(
        roll.edge_x_next, roll.parent_mean[roll.edge_parent], roll.parent_std[roll.edge_parent], reduce
    )  # [E]
    old = torch.zeros(m, k, dtype=torch.float64)
    old[roll.edge_parent.cpu(), slot.cpu()] = lp.cpu()
    rows = TreeRows(
        x=roll.parent_x,
        sigma=roll.parent_sigma,
        sigma_next=roll.parent_sigma_next,
        step=roll.parent_step,
        std=roll.parent_std,
        cond=cond.index(roll.parent_root),
        children=children,
        child_mask=mask.cpu(),
        old_log_prob=old,
        edge_index=edge_index.cpu(),
        sigma_next_of_one=float(sigmas[1]),
        num_steps=num_steps,
    )
    return rows, slot


def tree_credit(
    roll: Any,
    rows: TreeRows,
    leaf_ids: torch.Tensor,
    tcfg: Any,
    metrics: dict[str, float],
) -> Callable[[torch.Tensor, Any], tuple[torch.Tensor, torch.Tensor]]:
    """The ``extras["credit"]`` callable of a tree rollout: (scores [K, N], balanced) -> (advantages [M, k], valid
    [M, k]) per edge, laid out like ``rows.children``.

    Leaf signal: the balancer's per-sample advantage (for one reward the group-normalised reward; for several the
    balancer's combination), so every balancer works with trees. A leaf the balancer masked (non-finite reward)
    enters with the value the balancer gave it (the built-in balancers give the valid leaves' mean, 0; a NaN from a
    plug-in balancer masks every edge whose advantage it reaches, e.g. its sibling's in "sibling" mode, rather than
    stand in for a reward), and edges whose subtree holds no valid leaf, or whose tree is tied, are masked out. Edge
    credit: :func:`imgalign.trainers.tree.tree_advantages` with the configured mode and value."""
    from imgalign.trainers.tree import propagate_values, tree_advantages

    def credit(scores: torch.Tensor, balanced: Any) -> tuple[torch.Tensor, torch.Tensor]:
        dev = roll.node_parent.device
        signal = balanced.advantages[leaf_ids].float().to(dev)  # [L]
        leaf_valid = balanced.valid[leaf_ids].to(dev)  # [L]
        adv_e = tree_advantages(
            roll,
            signal,
            mode=tcfg.advantage,
            value=tcfg.value,
            temperature=tcfg.value_temperature,
            eps=tcfg.adv_eps,
            clip=tcfg.adv_clip,
        )  # [E]
        has_valid = propagate_values(roll.node_parent, roll.node_depth, roll.leaf_node, leaf_valid.float())
        valid_e = (has_valid[roll.edge_child] > 0) & torch.isfinite(adv_e)  # [E]
        adv_e = torch.where(valid_e, adv_e, torch.zeros_like(adv_e))
        idx = rows.edge_index.clamp_min(0)
        adv = torch.where(rows.child_mask, adv_e.cpu()[idx], torch.zeros(idx.shape))  # [M, k]
        valid = rows.child_mask & valid_e.cpu()[idx]
        metrics["tree/edge_valid_ratio"] = float(valid_e.float().mean())
        metrics["tree/edge_adv_abs_mean"] = float(adv_e[valid_e].abs().mean()) if valid_e.any() else 0.0
        return adv, valid

    return credit


@ROLLOUTS.register("tree")
def tree_rollout_strategy(
    ctx: RolloutContext,
    prompts: list[str],
    metadata: list[dict[str, Any]],
    sample_ids: torch.Tensor,
    group_ids: torch.Tensor,
) -> Rollout:
    """Tree rollouts (TreeGRPO / BranchGRPO, algorithms.md section 3): one shared initial noise per prompt, SDE
    branches at ``sampling.tree.branch_steps`` (ODE or single-child SDE elsewhere), every shared prefix computed
    once. The G = group_size leaves of a prompt are its group, scored like flat samples; only branching edges are
    trained, each against the std it was sampled with, with per-edge advantages from ``extras["credit"]``.

    Randomness per tree: the root noise and every SDE noise of tree g come from a generator seeded by (seed, step,
    global group id), so a tree does not depend on how trees are split over processes or forward batches."""
    from imgalign.trainers.tree import nfe_report, tree_rollout, tree_spec_for_step

    a, cfg = ctx.adapter, ctx.cfg
    g_size = cfg.group_size
    n = len(prompts)
    if n % g_size or not torch.equal(group_ids, group_ids[::g_size].repeat_interleave(g_size)):
        raise ValueError(
            f"tree rollout: got {n} samples that are not whole groups of group_size={g_size} (every tree is one "
            "prompt's group and must live on one process)"
        )
    spec = tree_spec_for_step(cfg.tree, cfg.num_steps, ctx.step)
    if spec.num_leaves != g_size:
        raise ValueError(f"tree rollout: {spec.num_leaves} leaves per tree but group_size={g_size}")
    trees = group_ids[::g_size]  # [P] global group ids
    tree_prompts = prompts[::g_size]
    gens = [torch.Generator().manual_seed(_mix(ctx.seed, ctx.step, int(gid), 7919)) for gid in trees]
    noise = a.init_noise(gens)  # [P, ...] one shared initial noise per prompt
    cond = a.encode(tree_prompts)  # [P]
    sig = a.sigmas(cfg.num_steps).to(noise.device)
    p = len(trees)

    def velocity_fn(x: torch.Tensor, sigma: torch.Tensor, root: torch.Tensor) -> torch.Tensor:
        return a.velocity(x, sigma, cond.index(root), cfg.guidance_scale, transformer=ctx.model)

    def sde_step(x, v, sigma, sigma_next, noise_level, _generator):  # noqa: ANN001, ANN202
        mean, std = kernel_mean_std(cfg.kernel, x, v, sigma, sigma_next, noise_level, sig[1])
        per = x.shape[0] // p  # rows are tree-major: P equal blocks, one per tree
        eps = torch.cat([torch.randn((per, *x.shape[1:]), generator=g) for g in gens]).to(x.device)
        return mean + K._bcast(std, mean) * eps, mean, std

    def ode_step(x, v, sigma, sigma_next):  # noqa: ANN001, ANN202
        return K.ode_step(x, v, sigma, sigma_next).prev_sample

    roll = tree_rollout(
        velocity_fn,
        noise,
        sig,
        spec,
        sde_step=sde_step,
        ode_step=ode_step,
        noise_level=cfg.noise_level,
        between=cfg.tree.between,
        cfg_multiplier=a.nfe_per_step(cfg.guidance_scale),
        max_batch=cfg.batch_size,
    )
    rows, _ = _tree_rows(roll, cond, sig, cfg.num_steps, ctx.logprob_reduce)
    images = torch.cat(
        [a.decode(roll.leaves[s : s + cfg.batch_size]).cpu() for s in range(0, n, cfg.batch_size)]
    )
    uses_cfg = a.nfe_per_step(cfg.guidance_scale) == 2
    metrics: dict[str, float] = nfe_report(spec, cfg.prompts_per_step, cfg=uses_cfg)
    metrics["tree/trained_edges"] = float(roll.edge_child.numel())
    metrics["tree/parent_rows"] = float(rows.x.shape[0])
    metrics["tree/first_branch_step"] = float(spec.branch_steps[0])
    return Rollout(
        prompts=list(prompts),
        metadata=list(metadata),
        sample_ids=sample_ids,
        group_ids=group_ids,
        cond=cond.index(torch.arange(p).repeat_interleave(g_size)),
        sigmas=a.sigmas(cfg.num_steps),
        latents=roll.leaves.float()[:, None],  # [L, 1, ...]: only the leaves (x0) are kept per sample
        log_probs=torch.zeros(n, 0),
        train_steps=list(spec.branch_steps),
        images=images,
        nfe=roll.nfe,
        extras={
            "tree": rows,
            "credit": tree_credit(roll, rows, sample_ids, cfg.tree, metrics),
            "metrics": metrics,
        },
        train_rows=rows.x.shape[0],
    )

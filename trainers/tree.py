"""Tree-branching rollouts with shared prefixes, leaf-to-root value propagation and per-edge advantages.

Follows ``shared/papers/algorithms.md`` sections 2-3 (Flow-GRPO SDE; TreeGRPO, BranchGRPO, TempFlow-GRPO, B²-DiffuRL)
and the TreeGRPO / B²-DiffuRL abstracts (``abstracts.md``).

A tree starts from one initial noise per prompt. At each *branch step* b (a sampling-step index) every live node
takes one SDE transition per child: the velocity is evaluated once for the parent, the k children share the SDE mean
mu and std and differ only in their noise. Elsewhere a node takes a deterministic Euler (ODE) step, or a single-child
SDE step (``between="sde"``). Every shared prefix is therefore computed once, and the NFE count is exact:

    NFE per tree = sum_i alive(i) · cfg,   alive(i) = prod_{b in branch_steps, b < i} k_b

(``cfg`` = 2 when the velocity function runs classifier-free guidance as one batched [uncond; cond] forward), against
G·T·cfg for G independent flat trajectories. Only branching edges are recorded and trained, each with the mean and
std actually used to sample it (BranchGRPO evaluates its scaled split noise at the unscaled std; we never rescale).

Credit assignment (``advantage``), for leaf rewards R [L] (or [L, K] for K rewards):

- ``"depth"`` (BranchGRPO): node value = mean of its children (so of its leaves); the edge parent->child gets the
  child's value, normalised over all edges of the same depth in the same tree (all edges of one branch step).
- ``"tree"`` (TreeGRPO): leaf rewards are first normalised over the tree's leaves (the prompt group), then
  propagated up; each edge's advantage is its child's value: step-specific, and at the first branch the children's
  values average to zero.
- ``"sibling"`` (the within-branch comparison of TempFlow-GRPO / B²-DiffuRL): the children of one parent share
  everything up to the branch step, so their difference is credited to that step alone; the edge advantage is the
  child's value normalised among its siblings (with k = 2 this is +-1 or 0).

Value propagation (``value``): ``"mean"`` (default; the unbiased Monte Carlo estimate since children are sampled
from the policy) or ``"logprob"``: children weighted by softmax over siblings of (per-dimension mean log-density of
the edge)/temperature. Ties give zero advantage; advantages are clipped to +-adv_clip.

B²-DiffuRL's backward-progressive schedule: :func:`backward_progressive_window` gives the first trained step at
training step k (the last trainable steps first, extended backwards over training); :func:`restrict_to_window` turns
the configured tree into one that branches only inside that window (keeping the number of leaves), so the prefix
before the window is shared by the whole group.

Integration with the trainer (one rollout; P trees, normally one per prompt):

    spec = tree_spec_for_step(cfg, num_steps, train_step)                 # TreeSpec (progressive-aware)
    roll = tree_rollout(velocity_fn, noise [P, C, H, W], sigmas [T+1], spec, sde_step=kernels_sde_step,
                        ode_step=kernels_ode_step, noise_level=a, between=cfg.between, generator=g,
                        cfg_multiplier=2 if cfg_scale > 1 else 1)           # no grad inside
    x0 = roll.leaves                  # [L = P·spec.num_leaves, C, H, W]; tree of each leaf: roll.leaf_root [L]
    R = rewards(decode(x0))           # [L]
    A = tree_advantages(roll, R, mode=cfg.advantage, value=cfg.value, temperature=cfg.value_temperature,
                        eps=cfg.adv_eps, clip=cfg.adv_clip)                  # [E], one per branching edge
    # update: v_theta once per PARENT row (siblings share x, sigma and conditioning), M <= E rows
    v = model(roll.parent_x, roll.parent_sigma, cond[roll.parent_root])     # [M, C, H, W], with grad
    mean, _ = flow_sde_mean_std(roll.parent_x, v, roll.parent_sigma, roll.parent_sigma_next, a)  # or the kernel's
    ratio = exp(edge_log_prob(roll, mean) - roll.edge_log_prob)            # [E]; == 1 with unchanged weights
    loss = GRPO clip loss(ratio, A) (+ KL, + vnorm penalty on v vs v_ref at the same parent rows)
    metrics |= nfe_report(spec, P, cfg=cfg_scale > 1) | {"perf/rollout_nfe_counted": roll.nfe}

edge_log_prob sums over latent dims (the honest density). A trainer that uses the reference code's per-dimension
mean instead must recompute the old log-prob the same way from roll.parent_mean / roll.parent_std (the mean and
std actually used) so the ratio is exactly 1 before the first update.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from imgalign.config import ConfigError, field
from imgalign.trainers.balance import group_normalize

VelocityFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
SdeStep = Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
OdeStep = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class TreeConfig:
    """Tree-branching rollout and credit assignment settings (algorithms.md section 3)."""

    branch_steps: list[int] = field(
        default_factory=lambda: [0, 3, 6],
        help="Sampling-step indices where every node branches (< num_steps - 1).",
    )
    branch_factors: list[int] = field(
        default_factory=lambda: [2],
        help="Children per node at each branch step (one value = the same everywhere).",
    )
    between: Literal["ode", "sde"] = field(
        "ode",
        help="Transition at non-branch steps: deterministic Euler (ode) or a single-child SDE step (sde).",
    )
    advantage: Literal["depth", "tree", "sibling"] = field(
        "depth",
        help="Edge advantage: depth (BranchGRPO), tree (TreeGRPO) or sibling (within-branch comparison).",
    )
    value: Literal["mean", "logprob"] = field(
        "mean",
        help="Node value: mean of children, or softmax(log-density/temperature)-weighted over siblings.",
    )
    value_temperature: float = field(
        1.0, help="Temperature of the log-prob weighting (per-dimension mean log-density)."
    )
    adv_eps: float = field(1e-4, help="Added to the std when normalising advantages.")
    adv_clip: float = field(5.0, help="Clip edge advantages to +-adv_clip (0 = no clip).")
    progressive: bool = field(
        False, help="B²-DiffuRL backward-progressive schedule: branch/train late steps first."
    )
    progressive_initial: int = field(
        1, help="Trainable steps (counted from the last trainable one) at step 0."
    )
    progressive_grow_every: int = field(10, help="Training steps between extensions of the trained window.")
    progressive_grow_by: int = field(1, help="Steps added to the front of the window at each extension.")

    def validate(self) -> None:
        if not self.branch_factors or any(k < 2 for k in self.branch_factors):
            raise ConfigError(
                f"sampling.tree.branch_factors must be integers >= 2 (got {self.branch_factors})."
            )
        if len(self.branch_factors) not in (1, len(self.branch_steps)):
            raise ConfigError(
                f"sampling.tree.branch_factors has {len(self.branch_factors)} entries for {len(self.branch_steps)} branch "
                "steps; give one factor, or one per branch step."
            )
        if not self.branch_steps:
            raise ConfigError(
                "sampling.tree.branch_steps is empty: give at least one branch step, or use flat rollouts."
            )
        # an infinite adv_eps zeroed every advantage (nothing trained, silently)
        finite = all(math.isfinite(x) for x in (self.value_temperature, self.adv_eps, self.adv_clip))
        if not finite or self.value_temperature <= 0 or self.adv_eps <= 0 or self.adv_clip < 0:
            raise ConfigError(
                "sampling.tree.value_temperature and sampling.tree.adv_eps must be > 0, sampling.tree.adv_clip >= 0, "
                f"all finite (got {self.value_temperature}, {self.adv_eps}, {self.adv_clip})."
            )
        # one message for the three named none of them by its full key, nor the value given
        for name, least in (
            ("progressive_initial", 1),
            ("progressive_grow_every", 1),
            ("progressive_grow_by", 0),
        ):
            if getattr(self, name) < least:
                raise ConfigError(f"sampling.tree.{name} must be >= {least} (got {getattr(self, name)}).")

    def spec(self, num_steps: int) -> TreeSpec:
        factors = (
            self.branch_factors * len(self.branch_steps)
            if len(self.branch_factors) == 1
            else self.branch_factors
        )
        return TreeSpec(num_steps, tuple(self.branch_steps), tuple(factors))


@dataclass(frozen=True)
class TreeSpec:
    """Which sampling steps branch and into how many children. Step i goes from sigmas[i] to sigmas[i+1]."""

    num_steps: int
    branch_steps: tuple[int, ...]
    branch_factors: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.num_steps < 2:
            raise ValueError(f"TreeSpec: num_steps must be >= 2 (got {self.num_steps})")
        if len(self.branch_steps) != len(self.branch_factors):
            raise ValueError("TreeSpec: give one branching factor per branch step")
        if list(self.branch_steps) != sorted(set(self.branch_steps)):
            raise ValueError(f"TreeSpec: branch_steps must be strictly increasing (got {self.branch_steps})")
        if any(not 0 <= b < self.num_steps - 1 for b in self.branch_steps):
            raise ValueError(
                f"TreeSpec: branch steps {self.branch_steps} must lie in [0, {self.num_steps - 2}]: the last step "
                "(sigma -> 0) is never trained, its log-density overflows"
            )
        if any(k < 1 for k in self.branch_factors):
            raise ValueError(f"TreeSpec: branching factors must be >= 1 (got {self.branch_factors})")

    @property
    def num_leaves(self) -> int:
        return math.prod(self.branch_factors)

    def factor_at(self, step: int) -> int:
        """Children per node at `step` (1 when the step does not branch)."""
        return dict(zip(self.branch_steps, self.branch_factors)).get(step, 1)

    def alive(self, step: int) -> int:
        """Nodes (velocity evaluations) per tree at sampling step `step`."""
        return math.prod(k for b, k in zip(self.branch_steps, self.branch_factors) if b < step)

    def nfe(self, num_trees: int = 1, cfg: bool = False) -> int:
        """Exact transformer evaluations for `num_trees` trees: shared prefixes count once, CFG counts twice."""
        return num_trees * (2 if cfg else 1) * sum(self.alive(i) for i in range(self.num_steps))

    def num_edges(self) -> int:
        """Trained (branching) edges per tree."""
        return sum(self.alive(b) * k for b, k in zip(self.branch_steps, self.branch_factors))


def flat_nfe(num_images: int, num_steps: int, cfg: bool = False) -> int:
    """NFEs of independent (flat) Flow-GRPO trajectories: every image pays every step."""
    return num_images * num_steps * (2 if cfg else 1)


# ---- reference step kernels (algorithms.md section 2); the trainer may pass its own ------------------------------


def _rows(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Per-row scalars [N] -> [N, 1, ..., 1] in like's dtype."""
    return t.reshape(-1, *([1] * (like.ndim - 1))).to(like.dtype)


def euler_step(
    x: torch.Tensor, v: torch.Tensor, sigma: torch.Tensor, sigma_next: torch.Tensor
) -> torch.Tensor:
    """Euler ODE step x' = x + v·(sigma' - sigma). x, v [N, ...]; sigma, sigma_next [N]."""
    return x + v * _rows(sigma_next - sigma, x)


def flow_sde_mean_std(
    x: torch.Tensor, v: torch.Tensor, sigma: torch.Tensor, sigma_next: torch.Tensor, noise_level: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean [N, ...] and std [N] of the Flow-GRPO SDE transition (algorithms.md section 2).

    s = a·sqrt(sigma/(1 - sigma)) (the next sigma in the denominator at sigma = 1), dt = sigma' - sigma,
    mu = x + v·dt + (s²/(2 sigma))·(x + (1 - sigma)·v)·dt, std = s·sqrt(-dt); a = 0 gives the Euler step.
    """
    s = sigma.double()
    s_next = sigma_next.double()
    denom = torch.where(s >= 1.0, 1.0 - s_next, 1.0 - s)
    vs = noise_level * torch.sqrt(s / denom)  # [N] the noise coefficient varsigma
    dt = s_next - s  # [N], negative
    coef = (vs**2 / (2.0 * s)) * dt  # [N]
    mean = x + v * _rows(dt, x) + _rows(coef, x) * (x + _rows(1.0 - s, x) * v)
    std = (vs * torch.sqrt(-dt)).to(torch.float32)  # [N]
    return mean, std


def flow_sde_step(
    x: torch.Tensor,
    v: torch.Tensor,
    sigma: torch.Tensor,
    sigma_next: torch.Tensor,
    noise_level: float,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Flow-GRPO SDE step: x' = mu + std·eps. x, v [N, ...]; sigma, sigma_next [N]. Returns (x', mu, std [N])."""
    mean, std = flow_sde_mean_std(x, v, sigma, sigma_next, noise_level)
    eps = torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
    return mean + _rows(std, x) * eps, mean, std


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """log N(x; mean, std²·I) summed over latent dims: float32 terms, a float64 sum (see kernels.reduce_dims).
    x, mean [N, ...]; std [N] -> [N] float64."""
    xf, mf = x.float(), mean.float()
    sf = _rows(std.float(), xf)
    d = xf[0].numel()
    lp = -((xf - mf) ** 2) / (2.0 * sf**2) - torch.log(sf) - 0.5 * math.log(2.0 * math.pi)
    return lp.flatten(1).sum(1, dtype=torch.float64) if d else lp.new_zeros(x.shape[0], dtype=torch.float64)


# ---- the rollout driver ------------------------------------------------------------------------------------------


@dataclass
class TreeRollout:
    """Everything a tree rollout produced. Rows of each tensor are ordered tree-major, siblings adjacent.

    Nodes: roots 0..P-1, then children in creation order. Parents (rows where a branching transition started, one
    per (node, branch step)): parent_x [M, ...] the latent the velocity was evaluated at, parent_sigma /
    parent_sigma_next [M], parent_step [M], parent_root [M], parent_node [M], parent_mean [M, ...] and parent_std [M]
    (the mean and std actually used). Edges (one per child): edge_parent [E] (row into the parent tensors),
    edge_child [E] (node id), edge_x_next [E, ...], edge_log_prob [E] (float64, summed over latent dims, at sampling).
    """

    leaves: torch.Tensor  # [L, ...] final latents (x at sigma_T)
    leaf_node: torch.Tensor  # [L]
    leaf_root: torch.Tensor  # [L]
    node_parent: torch.Tensor  # [Nn], -1 for roots
    node_root: torch.Tensor  # [Nn]
    node_depth: torch.Tensor  # [Nn], 0 for roots
    parent_x: torch.Tensor  # [M, ...]
    parent_sigma: torch.Tensor  # [M]
    parent_sigma_next: torch.Tensor  # [M]
    parent_step: torch.Tensor  # [M]
    parent_root: torch.Tensor  # [M]
    parent_node: torch.Tensor  # [M]
    parent_mean: torch.Tensor  # [M, ...]
    parent_std: torch.Tensor  # [M]
    edge_parent: torch.Tensor  # [E]
    edge_child: torch.Tensor  # [E]
    edge_x_next: torch.Tensor  # [E, ...]
    edge_log_prob: torch.Tensor  # [E]
    nfe: int
    spec: TreeSpec

    @property
    def edge_step(self) -> torch.Tensor:
        return self.parent_step[self.edge_parent]

    def edge_fields(self) -> dict[str, torch.Tensor]:
        """Per-edge flat view [E, ...] (x, x_next, mean, std, sigma, sigma_next, step, root, parent/child node ids,
        log_prob), for trainers that do not share the v_theta evaluation between siblings."""
        p = self.edge_parent
        return {
            "x": self.parent_x[p],
            "x_next": self.edge_x_next,
            "mean": self.parent_mean[p],
            "std": self.parent_std[p],
            "sigma": self.parent_sigma[p],
            "sigma_next": self.parent_sigma_next[p],
            "step": self.parent_step[p],
            "root": self.parent_root[p],
            "parent_node": self.parent_node[p],
            "child_node": self.edge_child,
            "log_prob": self.edge_log_prob,
        }


def _std_rows(std: torch.Tensor | float, n: int, device: torch.device) -> torch.Tensor:
    """A step kernel's std (scalar, [N] or [N, 1, ...]) -> [N] float32; it must be isotropic within a row."""
    s = torch.as_tensor(std, device=device, dtype=torch.float32)
    if s.numel() == 1:
        return s.reshape(1).expand(n).clone()
    if s.shape[0] != n:
        raise ValueError(
            f"sde_step returned std of shape {tuple(s.shape)} for {n} rows; expected [N] or a scalar"
        )
    flat = s.reshape(n, -1)
    # a std that varies within a row (a plug-in kernel with a per-element noise level) was cut to its first entry
    # without a word: the branch log-densities would use the wrong variance
    if not torch.equal(flat, flat[:, :1].expand_as(flat)):
        raise ValueError(
            f"sde_step returned a std of shape {tuple(s.shape)} that varies within a row; the tree rollout needs one "
            "std per row (an isotropic step): return [N], or [N, 1, ...] with one value per row"
        )
    return flat[:, 0].clone()


def tree_rollout(
    velocity_fn: VelocityFn,
    noise: torch.Tensor,
    sigmas: torch.Tensor,
    spec: TreeSpec,
    sde_step: SdeStep = flow_sde_step,
    ode_step: OdeStep = euler_step,
    noise_level: float = 0.7,
    between: Literal["ode", "sde"] = "ode",
    generator: torch.Generator | None = None,
    cfg_multiplier: int = 1,
    max_batch: int | None = None,
) -> TreeRollout:
    """Sample P trees (one per row of `noise` [P, ...]) on the schedule sigmas [T+1] (decreasing, sigmas[T] ~ 0).

    velocity_fn(x [N, ...], sigma [N], root [N]) -> v [N, ...]: root indexes the tree (prompt) of each row, so the
    caller gathers its conditioning. sde_step(x, v, sigma [N], sigma_next [N], noise_level, generator) -> (x_next,
    mean, std); ode_step(x, v, sigma [N], sigma_next [N]) -> x_next. cfg_multiplier (1 or 2) is the NFE cost of one
    row. max_batch chunks the velocity calls (NFE unchanged). Runs without gradient.
    """
    if sigmas.ndim != 1 or sigmas.numel() != spec.num_steps + 1:
        raise ValueError(
            f"tree_rollout: sigmas must be [num_steps + 1] = [{spec.num_steps + 1}], got {tuple(sigmas.shape)}"
        )
    if cfg_multiplier not in (1, 2):
        raise ValueError(f"tree_rollout: cfg_multiplier must be 1 or 2 (got {cfg_multiplier})")
    if between not in ("ode", "sde"):
        raise ValueError(f"tree_rollout: between must be 'ode' or 'sde' (got {between!r})")
    device = noise.device
    p = noise.shape[0]
    x = noise
    node = torch.arange(p, device=device)
    root = torch.arange(p, device=device)
    node_parent, node_root, node_depth = (
        [torch.full((p,), -1, device=device)],
        [root.clone()],
        [torch.zeros_like(root)],
    )
    next_id = p
    parents: dict[str, list[torch.Tensor]] = {
        k: [] for k in ("x", "s", "sn", "step", "root", "node", "mean", "std")
    }
    edges: dict[str, list[torch.Tensor]] = {k: [] for k in ("parent", "child", "x_next", "lp")}
    n_parent_rows = 0
    nfe = 0
    with torch.no_grad():
        for i in range(spec.num_steps):
            n = x.shape[0]
            sig = sigmas[i].to(device=device, dtype=torch.float32).expand(n).clone()  # [N]
            sig_next = sigmas[i + 1].to(device=device, dtype=torch.float32).expand(n).clone()
            chunks = [slice(j, j + (max_batch or n)) for j in range(0, n, max_batch or n)]
            v = torch.cat([velocity_fn(x[c], sig[c], root[c]) for c in chunks])  # [N, ...]
            nfe += n * cfg_multiplier
            k = spec.factor_at(i)
            if i in spec.branch_steps:
                xr, vr = x.repeat_interleave(k, 0), v.repeat_interleave(k, 0)  # [N·k, ...] siblings adjacent
                sr, snr = sig.repeat_interleave(k), sig_next.repeat_interleave(k)
                x_next, mean, std = sde_step(xr, vr, sr, snr, noise_level, generator)
                std = _std_rows(std, n * k, device)  # [N·k]
                lp = gaussian_log_prob(x_next, mean, std)  # [N·k]
                children = torch.arange(next_id, next_id + n * k, device=device)
                next_id += n * k
                parents["x"].append(x)
                parents["s"].append(sig)
                parents["sn"].append(sig_next)
                parents["step"].append(torch.full((n,), i, device=device))
                parents["root"].append(root)
                parents["node"].append(node)
                parents["mean"].append(mean[::k])
                parents["std"].append(std[::k])
                edges["parent"].append(torch.arange(n, device=device).repeat_interleave(k) + n_parent_rows)
                edges["child"].append(children)
                edges["x_next"].append(x_next)
                edges["lp"].append(lp)
                n_parent_rows += n
                node_parent.append(node.repeat_interleave(k))
                root = root.repeat_interleave(k)
                node_root.append(root)
                node_depth.append(torch.cat(node_depth)[node].repeat_interleave(k) + 1)
                x, node = x_next, children
            elif between == "sde":
                x, _, _ = sde_step(x, v, sig, sig_next, noise_level, generator)
            else:
                x = ode_step(x, v, sig, sig_next)
    if not parents["x"]:
        raise ValueError("tree_rollout: the spec has no branch steps, so nothing would be trained")
    cat = torch.cat
    return TreeRollout(
        leaves=x,
        leaf_node=node,
        leaf_root=root,
        node_parent=cat(node_parent),
        node_root=cat(node_root),
        node_depth=cat(node_depth),
        parent_x=cat(parents["x"]),
        parent_sigma=cat(parents["s"]),
        parent_sigma_next=cat(parents["sn"]),
        parent_step=cat(parents["step"]),
        parent_root=cat(parents["root"]),
        parent_node=cat(parents["node"]),
        parent_mean=cat(parents["mean"]),
        parent_std=cat(parents["std"]),
        edge_parent=cat(edges["parent"]),
        edge_child=cat(edges["child"]),
        edge_x_next=cat(edges["x_next"]),
        edge_log_prob=cat(edges["lp"]),
        nfe=nfe,
        spec=spec,
    )


def edge_log_prob(rollout: TreeRollout, parent_mean: torch.Tensor) -> torch.Tensor:
    """log-density [E] (float64, summed over latent dims) of every recorded edge under new parent means [M, ...].

    parent_mean: the SDE mean recomputed from v_theta evaluated once per parent row (rollout.parent_x, parent_sigma,
    parent_root); the std is the one used at sampling. With unchanged weights this equals rollout.edge_log_prob.
    """
    p = rollout.edge_parent
    return gaussian_log_prob(rollout.edge_x_next, parent_mean[p], rollout.parent_std[p])


# ---- credit assignment ---------------------------------------------------------------------------------------------


def propagate_values(
    node_parent: torch.Tensor,
    node_depth: torch.Tensor,
    leaf_node: torch.Tensor,
    leaf_values: torch.Tensor,
    node_logit: torch.Tensor | None = None,
) -> torch.Tensor:
    """Leaf-to-root values: a node's value is the (weighted) mean of its children's values.

    node_parent, node_depth [Nn] (parent -1 for roots); leaf_node [L]; leaf_values [L] or [L, K]. node_logit [Nn]
    (optional): unnormalised log-weight of each node among its siblings (softmax over siblings); None = plain mean.
    Returns values [Nn] or [Nn, K] (float32). Nodes that are neither leaves nor ancestors of leaves stay NaN.
    """
    squeeze = leaf_values.ndim == 1
    lv = leaf_values.float().reshape(leaf_values.shape[0], -1)  # [L, K]
    nn_, kk = node_parent.shape[0], lv.shape[1]
    values = torch.full((nn_, kk), float("nan"), device=lv.device)
    values[leaf_node] = lv
    is_leaf = torch.zeros(nn_, dtype=torch.bool, device=lv.device)
    is_leaf[leaf_node] = True
    for d in range(int(node_depth.max()), 0, -1):
        kids = ((node_depth == d) & ~torch.isnan(values[:, 0])).nonzero().reshape(-1)  # [n_d]
        if kids.numel() == 0:
            continue
        par = node_parent[kids]
        if node_logit is None:
            w = torch.ones(kids.numel(), device=lv.device)
        else:
            logit = node_logit[kids].float()
            top = torch.full((nn_,), -float("inf"), device=lv.device).scatter_reduce(
                0, par, logit, reduce="amax"
            )
            w = torch.exp(logit - top[par])  # softmax numerator, stable per sibling group
        num = torch.zeros(nn_, kk, device=lv.device).index_add_(0, par, w[:, None] * values[kids])
        den = torch.zeros(nn_, device=lv.device).index_add_(0, par, w)
        has = (den > 0) & ~is_leaf
        values[has] = num[has] / den[has, None]
    return values[:, 0] if squeeze else values


def edge_advantages(
    values: torch.Tensor,
    edge_child: torch.Tensor,
    node_parent: torch.Tensor,
    node_group: torch.Tensor,
    node_depth: torch.Tensor,
    mode: Literal["depth", "sibling", "tree"],
    eps: float = 1e-4,
    clip: float = 5.0,
) -> torch.Tensor:
    """Per-edge advantage from node values [Nn] or [Nn, K]; edge_child [E] -> [E] or [E, K].

    node_group [Nn]: the tree (or prompt group) of each node. depth: normalise the children's values over edges of
    the same (group, depth); sibling: over the children of the same parent; tree: the child's value as it is (values
    must come from per-group-normalised leaf rewards, as :func:`tree_advantages` does).
    """
    v = values[edge_child]
    if mode == "tree":
        adv = v.float()
    elif mode == "sibling":
        adv = group_normalize(v, node_parent[edge_child], eps=eps)
    elif mode == "depth":
        depth = node_depth[edge_child]
        adv = group_normalize(v, node_group[edge_child] * (int(node_depth.max()) + 1) + depth, eps=eps)
    else:
        raise ValueError(f"edge_advantages: mode must be depth, sibling or tree (got {mode!r})")
    return adv.clamp(-clip, clip) if clip > 0 else adv


def tree_advantages(
    rollout: TreeRollout,
    leaf_rewards: torch.Tensor,
    mode: Literal["depth", "sibling", "tree"] = "depth",
    value: Literal["mean", "logprob"] = "mean",
    temperature: float = 1.0,
    eps: float = 1e-4,
    clip: float = 5.0,
    root_group: torch.Tensor | None = None,
) -> torch.Tensor:
    """Edge advantages [E] (or [E, K]) of a rollout from its leaf rewards [L] (or [L, K]), rows as rollout.leaves.

    root_group [P] (optional): the normalisation group of each tree, when several trees share one prompt; the
    default is one group per tree. Used by "tree" (leaf normalisation) and "depth" (per-depth normalisation).
    """
    if leaf_rewards.shape[0] != rollout.leaf_node.shape[0]:
        raise ValueError(
            f"tree_advantages: got {leaf_rewards.shape[0]} rewards for {rollout.leaf_node.shape[0]} leaves"
        )
    r = leaf_rewards.to(rollout.node_parent.device).float()
    node_group = rollout.node_root
    if root_group is not None:
        n_roots = int(rollout.node_root.max()) + 1
        if root_group.shape != (n_roots,):
            raise ValueError(f"tree_advantages: root_group must have one entry per tree ({n_roots})")
        node_group = root_group.to(rollout.node_root.device)[rollout.node_root]
    if mode == "tree":  # TreeGRPO: normalise the leaves of each group first, then propagate
        r = group_normalize(r, node_group[rollout.leaf_node], eps=eps)
    logit = None
    if value == "logprob":
        d = rollout.edge_x_next[0].numel()
        logit = torch.zeros(rollout.node_parent.shape[0], device=r.device)
        logit[rollout.edge_child] = (rollout.edge_log_prob.to(r.device) / d / temperature).to(logit.dtype)
    elif value != "mean":
        raise ValueError(f"tree_advantages: value must be 'mean' or 'logprob' (got {value!r})")
    values = propagate_values(rollout.node_parent, rollout.node_depth, rollout.leaf_node, r, logit)
    return edge_advantages(
        values, rollout.edge_child, rollout.node_parent, node_group, rollout.node_depth, mode, eps, clip
    )


# ---- B²-DiffuRL backward-progressive schedule ----------------------------------------------------------------------


def backward_progressive_window(
    train_step: int, num_steps: int, initial: int = 1, grow_every: int = 10, grow_by: int = 1
) -> list[int]:
    """Sampling steps trained at training step `train_step` (B²-DiffuRL): the last `initial` trainable steps, then
    `grow_by` more toward the start every `grow_every` training steps. The last sampling step is never trained.
    """
    last = num_steps - 2
    if last < 0:
        raise ValueError("backward_progressive_window: need num_steps >= 2")
    width = initial + (max(train_step, 0) // grow_every) * grow_by
    first = max(0, last - width + 1)
    return list(range(first, last + 1))


def restrict_to_window(base: TreeSpec, first_step: int) -> TreeSpec:
    """The tree that branches only at steps >= first_step, with the same number of leaves as `base`.

    Branch steps of `base` inside the window keep their factors; the product of the factors before the window is
    folded into the first branch inside it (a new branch at first_step if none lies inside).
    """
    inside = [(b, k) for b, k in zip(base.branch_steps, base.branch_factors) if b >= first_step]
    folded = math.prod(k for b, k in zip(base.branch_steps, base.branch_factors) if b < first_step)
    if not inside:
        return TreeSpec(base.num_steps, (first_step,), (folded,))
    steps = tuple(b for b, _ in inside)
    factors = (inside[0][1] * folded,) + tuple(k for _, k in inside[1:])
    return TreeSpec(base.num_steps, steps, factors)


def tree_spec_for_step(cfg: TreeConfig, num_steps: int, train_step: int = 0) -> TreeSpec:
    """The TreeSpec to roll out at training step `train_step` (B²-DiffuRL window applied when cfg.progressive)."""
    base = cfg.spec(num_steps)
    if not cfg.progressive:
        return base
    window = backward_progressive_window(
        train_step, num_steps, cfg.progressive_initial, cfg.progressive_grow_every, cfg.progressive_grow_by
    )
    return restrict_to_window(base, window[0])


def nfe_report(spec: TreeSpec, num_trees: int, cfg: bool = False) -> dict[str, float]:
    """Flat metrics for logging: NFEs of the rollout and per leaf / per trained edge, vs flat rollouts."""
    nfe = spec.nfe(num_trees, cfg)
    leaves = num_trees * spec.num_leaves
    return {
        "perf/rollout_nfe": float(nfe),
        "perf/nfe_per_leaf": nfe / leaves,
        "perf/nfe_per_trained_edge": nfe / (num_trees * spec.num_edges()),
        "perf/flat_nfe_same_leaves": float(flat_nfe(leaves, spec.num_steps, cfg)),
    }

"""Multi-reward advantages and balancers: weighted sum, GDPO and MARBLE (min-norm gradient balancing).

Follows ``shared/papers/algorithms.md`` section 6 and the MARBLE abstract (``abstracts.md``). Rewards arrive as a
matrix R [B, K] (B samples, K rewards) with prompt-group ids [B]; every balancer outputs what the base objective
consumes:

- ``weighted_sum``: A = group_normalize(sum_k w_k R_k) -- the reference code's default (raw scales dominate).
- ``gdpo``: A = batch_normalize(sum_k w_k group_normalize(R_k)) (GDPO: per-reward group normalisation first).
- ``marble``: per-reward advantages A_k = group_normalize(R_k) [B, K]; per-reward gradients g_k, normalised
  g^_k = g_k/||g_k||; alpha* = argmin_{alpha in simplex} ||sum_k alpha_k g^_k||^2 (MGDA min-norm point; closed form
  for K = 2, exact enumeration of the simplex faces for K <= 8, accelerated projected gradient beyond);
  alpha <- ema·alpha + (1 - ema)·alpha*; the update is d = sum_k alpha_k g^_k = sum_k c_k g_k with
  c_k = alpha_k/||g_k||.

Amortisation (MARBLE on DiffusionNFT): the NFT loss is affine in the per-sample optimality probability r, so
sum_k c_k L(r_k) = s·L(r_mix) with s = sum_k c_k and r_mix = sum_k (c_k/s)·r_k (each r_k from its own advantage
A_k). One backward of L(r_mix) therefore gives the MARBLE direction exactly (scaled by 1/s; by default we drop s,
since the optimiser's step size absorbs it: ``MarbleBalancer.mix``). Verified in ``tests/test_balance.py``.

How the Gram matrix G_kl = <g_k, g_l> is obtained cheaply (``BalanceConfig.marble_gram``), measured in
``bench/bench_marble.py`` (the trainer's own update on the embedded shapes model, NFT, K = 3; update time relative
to a single-reward update; figures and commands in the bench's docstring: ``output`` within noise of 1.0x,
``params`` over all 1.65M trainable weights ~3.6x, ``params`` refreshed every 10 updates ~1.0x):

- ``"output"`` (default): gradients with respect to the network output v_theta instead of the weights (the
  "MGDA-UB" bound of Sener & Koltun 2018, which balances gradients at the shared representation). For NFT these are
  available in closed form from two autograd calls through the loss head only (no backward through the network):
  a_i = dL+_i/dv, b_i = dL-_i/dv live on disjoint per-sample slices, so
  G = (P^T diag(aa) P + P^T diag(ab) Q + Q^T diag(ab) P + Q^T diag(bb) Q)/(beta·B)^2 with P = r [B, K], Q = 1 - P and
  the per-sample scalars aa_i = ||a_i||^2, ab_i = <a_i, b_i>, bb_i = ||b_i||^2 (:func:`nft_output_gram`). Cost: a
  few elementwise ops on a [B, ...] latent, independent of the model size.
- ``"params"``: true parameter-space gradients of each per-reward loss over the trainable parameters (e.g. the LoRA
  weights, or a subset chosen by the caller), K extra backward passes (:func:`param_gram`); refresh them only every
  N steps (``refresh_every``) and keep the EMA'd alpha in between. The output-space cosines are a proxy for the
  parameter-space ones (the Jacobian is left out); for the acceptance measure (share of mini-batches in which the
  worst reward's cosine with the update is negative) compute :func:`param_gram` on the LoRA weights at the logged
  steps.

Integration (NFT objective, K rewards, B samples in prompt groups ``group_ids`` [B]):

    A = balance_advantages(R [B, K], group_ids, cfg)        # [B] (weighted_sum/gdpo) or [B, K] (marble)
    v = model(x_t, t); v_old = ema.functional(model, x_t, t) (no grad)
    Lp, Lm = nft_loss_terms(v, v_old, x0, x_t, t, beta)      # [B] each
    if cfg.method == "marble":
        r_k = optimality_probability(A, nft.adv_clip)        # [B, K]
        if balancer.needs_refresh(update_step):
            gram = nft_output_gram(v, Lp, Lm, r_k, beta)     # or param_gram([nft_combine(r_k[:, k], Lp, Lm, beta)
            balancer.update(gram)                            #               for k in range(K)], lora_params)
            metrics |= balancer.diagnostics(gram)
        r = balancer.mix(r_k)                                # [B]
    else:
        r = optimality_probability(A, nft.adv_clip)          # [B]
    loss = nft_combine(r, Lp, Lm, beta) (+ ref / vnorm terms); loss.backward()   # ONE backward
    metrics |= reward_stats(R.T, R.T.isfinite(), names)     # from imgalign.trainers.rewarding

For Flow-GRPO use ``balancer.mix_advantages(A)``. What holds there: the clipped surrogate
max(-A·rho, -A·clip(rho)) is linear in A for every sample whose ratio rho is inside [1 - eps, 1 + eps] (always on the
first, on-policy update: rho = 1), so the gradient of L(A_mix) is exactly sum_k c_k grad L(A_k) there; for a sample
whose ratio is outside the clip range the active branch depends on the sign of A, so the mixed sample's gradient is
0 or the unclipped one while the per-reward sum mixes clipped (0) and unclipped terms: the identity is then only
approximate (it fails exactly on the clipped samples, whose share is logged as policy/clipfrac).

In ``imgalign train`` (``rewards.balancer: marble``; :class:`RewardBalancing`, trainer ``_update``): the objectives
expose ``head()`` (:class:`imgalign.trainers.objectives.LossHead`): one forward whose loss can be formed for any
advantage vector. Each micro-batch: per-reward advantages A [b, K] (:func:`imgalign.trainers.rewarding.
per_reward_advantages`, the same definition for every balancer) -> signal s_k = to_signal(A_k) (NFT: r_k; GRPO: A_k)
-> on the FIRST micro-batch of an update (every ``rewards.marble.refresh_every`` updates), the K per-reward policy
losses' gradients with respect to v_theta (``rewards.marble.gram: output``, default; K autograd calls through the loss
head only) or to the trainable weights (``params``; K extra backward passes) -> the Gram -> alpha* -> EMA -> c; the
mixed signal s_k @ c -> the loss (regularisers once, since sum c = 1) -> ONE backward per term. Every micro-batch of
the update uses the same c, so alpha* sees the first micro-batch only: set ``train.micro_batch_size`` to the samples
per update to let it see all of them, as the shapes example configs do. By default it sees that micro-batch's FIRST
loss term only (GRPO: the first trained SDE step of the shuffled rows' window; NFT: the first noise draw), so the
update costs ~1.01-1.06x a single-reward one; ``rewards.marble.all_terms`` sums the Gram over every term (every trained
SDE step / draw): the terms after the first are probed before the first is trained (:meth:`RewardBalancing.probe`:
one extra forward each, no backward; 1.45x against 1.01x on ``examples/shapes/marble.yaml``, 4 SDE steps).
``rewards.diagnose_cosines`` (any balancer) adds, per micro-batch, the gradients of the K per-reward losses and of the
loss actually back-propagated (d) in the same space, summed over the update (:class:`UpdateGram`), and logs
``balance/grad_cos/<reward>``, ``balance/grad_cos_min``, ``balance/neg_cos_share_step`` and the running
``balance/neg_cos_share`` (share of updates whose worst reward's cosine with d is negative); d is the loss gradient
before gradient clipping and AdamW's preconditioning. Measured cost: ``bench/bench_marble.py`` (figures in its
docstring).

Several processes: gather the rewards before the group normalisation (group members live on different ranks).
The output-space Gram sums over disjoint per-sample slices, so all-reducing (sum) the local Gram matrices, each
micro-batch's gradients weighted by its share of the update's valid samples (the weight its loss gets in the update),
gives the global one. Parameter-space Grams
need the per-reward gradients all-reduced first (K x P), not the local Grams.

Diagnostics: each reward's gradient cosine with the final update, from the Gram matrix of [g_1..g_K, d]
(:func:`cosines_with_update`), alpha, and the per-reward means (``reward/<name>/mean``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from imgalign.config import field

log = logging.getLogger(__name__)


@dataclass
class BalanceConfig:
    """How several rewards become one training signal (algorithms.md section 6)."""

    method: Literal["weighted_sum", "gdpo", "marble"] = field(
        "weighted_sum",
        help="weighted_sum (raw scores), gdpo (per-reward group norm, sum, batch norm) or marble.",
    )
    weights: list[float] = field(
        default_factory=list,
        help="Per-reward weights for weighted_sum/gdpo, in reward order (empty = all 1).",
    )
    std: Literal["group", "global"] = field(
        "group",
        help="Advantage denominator: the prompt group's std or the whole batch's std (flow_grpo global_std).",
    )
    adv_eps: float = field(1e-4, help="Added to the std in advantage normalisation.")
    adv_clip: float = field(5.0, help="Clip advantages to +-adv_clip after normalisation (0 = no clip).")
    marble_ema: float = field(
        0.9, help="EMA on MARBLE's alpha: alpha <- ema*alpha + (1-ema)*alpha* (0 = use each batch's alpha*)."
    )
    marble_gram: Literal["output", "params"] = field(
        "output",
        help="Where per-reward gradients are compared: the velocity output (cheap) or trainable params.",
    )
    marble_refresh_every: int = field(1, help="Recompute the Gram matrix and alpha* every N updates (>= 1).")
    marble_solver: Literal["auto", "projected_gradient"] = field(
        "auto",
        help="Min-norm solver for K >= 3 (K = 2: closed form; auto = exact face enumeration for K <= 8, else FISTA).",
    )

    def validate(self) -> None:
        if self.method not in ("weighted_sum", "gdpo", "marble"):
            raise ValueError(f"balance.method must be weighted_sum, gdpo or marble (got {self.method!r}).")
        if any(w < 0 for w in self.weights):
            raise ValueError(f"balance.weights must be non-negative (got {self.weights}).")
        if not 0.0 <= self.marble_ema < 1.0:
            raise ValueError(f"balance.marble_ema must be in [0, 1) (got {self.marble_ema}).")
        if self.marble_refresh_every < 1:
            raise ValueError(f"balance.marble_refresh_every must be >= 1 (got {self.marble_refresh_every}).")
        if self.adv_eps <= 0 or self.adv_clip < 0:
            raise ValueError("balance.adv_eps must be > 0 and balance.adv_clip >= 0.")


# ---- advantages ---------------------------------------------------------------------------------------------------


def group_normalize(
    values: torch.Tensor,
    group_ids: torch.Tensor,
    eps: float = 1e-4,
    std: Literal["group", "global"] = "group",
    clip: float = 0.0,
) -> torch.Tensor:
    """GRPO advantages (x - mean_group)/(std + eps) per column, in float32; ties within a group give exactly 0.

    values [B] or [B, K]; group_ids [B] (any integer labels, e.g. prompt index). std="group" uses the group's
    population std, "global" the whole batch's std per column. clip > 0 clips the result to +-clip.
    """
    squeeze = values.ndim == 1
    x = values.float().reshape(values.shape[0], math.prod(values.shape[1:]))  # [B, K]; B may be 0
    if group_ids.shape != (x.shape[0],):
        raise ValueError(f"group_normalize: group_ids must be [B]={x.shape[0]}, got {tuple(group_ids.shape)}")
    _, inv = torch.unique(group_ids, return_inverse=True)
    n_groups = int(inv.max()) + 1 if inv.numel() else 0
    counts = torch.zeros(n_groups, device=x.device).index_add_(
        0, inv, torch.ones_like(inv, dtype=torch.float32)
    )
    mean = (
        torch.zeros(n_groups, x.shape[1], device=x.device).index_add_(0, inv, x) / counts[:, None]
    )  # [G, K]
    centered = x - mean[inv]  # [B, K]
    var = (
        torch.zeros(n_groups, x.shape[1], device=x.device).index_add_(0, inv, centered.pow(2))
        / counts[:, None]
    )
    group_std = var.sqrt()  # [G, K]
    if std == "group":
        denom = group_std[inv]
    elif std == "global":
        denom = x.std(dim=0, unbiased=False, keepdim=True).expand_as(x)
    else:
        raise ValueError(f"group_normalize: std must be 'group' or 'global', got {std!r}")
    adv = centered / (denom + eps)
    # every member of the group has the same value: compared exactly, since the float32 mean of tied values can miss
    # them (7 x 0.1 leaves a std ~1e-8, an advantage ~1e-4 instead of 0)
    at = inv[:, None].expand_as(x)
    gmax = torch.full((n_groups, x.shape[1]), -torch.inf, device=x.device).scatter_reduce(0, at, x, "amax")
    gmin = torch.full((n_groups, x.shape[1]), torch.inf, device=x.device).scatter_reduce(0, at, x, "amin")
    tied = (gmax == gmin)[inv]  # [B, K]
    adv = torch.where(tied, torch.zeros_like(adv), adv)
    if clip > 0:
        adv = adv.clamp(-clip, clip)
    return adv[:, 0] if squeeze else adv


def zero_std_ratio(values: torch.Tensor, group_ids: torch.Tensor) -> float:
    """Share of groups whose values all tie (they carry no GRPO signal). values [B]."""
    ties = []
    for g in torch.unique(group_ids):
        v = values[group_ids == g]
        ties.append(bool((v == v[0]).all()))
    return sum(ties) / max(len(ties), 1)


def _weights(weights: Sequence[float] | torch.Tensor | None, k: int, device: torch.device) -> torch.Tensor:
    if weights is None or len(weights) == 0:
        return torch.ones(k, device=device)
    w = torch.as_tensor(
        list(weights) if not isinstance(weights, torch.Tensor) else weights, dtype=torch.float32
    )
    if w.shape != (k,):
        raise ValueError(
            f"balance: got {w.numel()} reward weights for {k} rewards; give one weight per reward"
        )
    return w.to(device)


def weighted_sum_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    weights: Sequence[float] | None = None,
    eps: float = 1e-4,
    std: Literal["group", "global"] = "group",
    clip: float = 5.0,
) -> torch.Tensor:
    """Reference default: group-normalise the weighted sum of raw rewards. rewards [B, K] -> advantages [B]."""
    w = _weights(weights, rewards.shape[1], rewards.device)
    return group_normalize(rewards.float() @ w, group_ids, eps=eps, std=std, clip=clip)


def gdpo_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    weights: Sequence[float] | None = None,
    eps: float = 1e-4,
    std: Literal["group", "global"] = "group",
    clip: float = 5.0,
) -> torch.Tensor:
    """GDPO: normalise each reward within its group, weighted-sum, then normalise over the batch. [B, K] -> [B]."""
    w = _weights(weights, rewards.shape[1], rewards.device)
    per_reward = group_normalize(rewards, group_ids, eps=eps, std=std)  # [B, K]
    combined = per_reward @ w  # [B]
    adv = (combined - combined.mean()) / (combined.std(unbiased=False) + eps)
    return adv.clamp(-clip, clip) if clip > 0 else adv


def balance_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, cfg: BalanceConfig) -> torch.Tensor:
    """Advantages for the configured balancer: [B] for weighted_sum/gdpo, per-reward [B, K] for marble.

    rewards [B, K] raw scores (higher is better), group_ids [B] prompt index of each sample.
    """
    if rewards.ndim != 2:
        raise ValueError(f"balance_advantages: rewards must be [B, K], got {tuple(rewards.shape)}")
    kw = {"eps": cfg.adv_eps, "std": cfg.std, "clip": cfg.adv_clip}
    if cfg.method == "weighted_sum":
        return weighted_sum_advantages(rewards, group_ids, cfg.weights, **kw)
    if cfg.method == "gdpo":
        return gdpo_advantages(rewards, group_ids, cfg.weights, **kw)
    if cfg.method == "marble":
        return group_normalize(rewards, group_ids, **kw)
    raise ValueError(f"balance_advantages: unknown method {cfg.method!r}; use weighted_sum, gdpo or marble")


# ---- min-norm point on the simplex ---------------------------------------------------------------------------------


def min_norm_2(gram: torch.Tensor) -> torch.Tensor:
    """Closed-form min-norm point for K = 2 (MGDA): alpha_1 = clip((G22 - G12)/(G11 + G22 - 2 G12), 0, 1).

    gram [2, 2] -> alpha [2]. When g1 = g2 (zero denominator) every alpha is optimal; returns [0.5, 0.5].
    """
    g = gram.double()
    den = g[0, 0] + g[1, 1] - 2.0 * g[0, 1]
    if den <= 1e-12 * (g[0, 0] + g[1, 1]).clamp_min(1e-300):
        a = torch.tensor(0.5, dtype=torch.float64)
    else:
        a = ((g[1, 1] - g[0, 1]) / den).clamp(0.0, 1.0)
    return torch.stack([a, 1.0 - a]).to(gram.dtype)


def project_simplex(v: torch.Tensor) -> torch.Tensor:
    """Euclidean projection of v [K] onto the probability simplex (sort-based, Duchi et al. 2008)."""
    u, _ = torch.sort(v, descending=True)
    css = u.cumsum(0) - 1.0
    idx = torch.arange(1, v.numel() + 1, dtype=v.dtype)
    cond = u - css / idx > 0
    rho = int(torch.nonzero(cond)[-1]) + 1
    theta = css[rho - 1] / rho
    return (v - theta).clamp_min(0.0)


def min_norm_simplex(
    gram: torch.Tensor,
    solver: Literal["auto", "projected_gradient"] = "auto",
    max_iter: int = 2000,
    tol: float = 1e-12,
) -> torch.Tensor:
    """alpha* = argmin_{alpha >= 0, sum alpha = 1} alpha^T G alpha, the min-norm point of the gradients' convex hull.

    gram [K, K] symmetric PSD (float64 internally) -> alpha [K] in gram's dtype. K = 1: [1]; K = 2: closed form;
    3 <= K <= 8 with solver="auto": exact enumeration of the simplex faces (:func:`_min_norm_enumerate`); otherwise
    accelerated projected gradient (FISTA, step 1/(2·lambda_max)) onto the simplex. (FISTA's 2000 iterations stop
    up to 27% above the optimum on ill-conditioned Grams, and the enumeration is faster up to K = 10: 16 ms vs 34 ms
    at K = 8, 65 ms vs 71 ms at K = 10, one thread.) (We tried Frank-Wolfe
    with exact line search, Sener & Koltun 2018 Alg. 2: its O(1/t) convergence left objective errors ~1e-3 after
    2000 iterations on random 3x3 Gram matrices, so it is not offered.)
    """
    k = gram.shape[0]
    if gram.shape != (k, k) or k == 0:
        raise ValueError(f"min_norm_simplex: gram must be a non-empty square matrix, got {tuple(gram.shape)}")
    if not torch.isfinite(gram).all():
        raise ValueError("min_norm_simplex: gram has non-finite entries (a reward gradient overflowed?)")
    if k == 1:
        return torch.ones(1, dtype=gram.dtype)
    if k == 2:
        return min_norm_2(gram)
    g = 0.5 * (gram.double().cpu() + gram.double().cpu().T)
    if solver == "auto" and k <= 8:
        return _min_norm_enumerate(g).to(gram.dtype)
    if solver in ("auto", "projected_gradient"):
        # accelerated projected gradient (FISTA) on f(a) = a^T G a, gradient 2 G a, Lipschitz constant 2 lambda_max
        lip = 2.0 * float(torch.linalg.eigvalsh(g)[-1])
        if lip <= 0:
            return torch.full((k,), 1.0 / k, dtype=gram.dtype)
        step = 1.0 / lip
        x = torch.full((k,), 1.0 / k, dtype=torch.float64)
        y, tk = x.clone(), 1.0
        for _ in range(max_iter):
            x_new = project_simplex(y - step * 2.0 * (g @ y))
            t_new = 0.5 * (1.0 + (1.0 + 4.0 * tk * tk) ** 0.5)
            y = x_new + ((tk - 1.0) / t_new) * (x_new - x)
            if float((x_new - x).abs().max()) < tol:
                x = x_new
                break
            x, tk = x_new, t_new
        return x.to(gram.dtype)
    raise ValueError(f"min_norm_simplex: unknown solver {solver!r}; use auto or projected_gradient")


def _min_norm_enumerate(g: torch.Tensor) -> torch.Tensor:
    """Exact min-norm point for small K: the optimum is the affine-hull minimiser of some face S of the simplex.

    For every non-empty support S solve the KKT system [G_S 1; 1^T 0][a; -lam] = [0; 1] (least squares for singular
    faces), keep the solutions with a >= 0, return the one with the lowest a^T G a. 2^K - 1 tiny solves (K <= 8),
    done in numpy: ~0.1 ms for K = 3, where torch's per-call overhead costs milliseconds.
    """
    gn = g.numpy()
    # alpha does not change with the gradients' scale; solved at |g|² ~ 1e8 (or 1e-6) the KKT systems lost the
    # digits that the feasibility and tie tests below need, so the largest squared norm is taken as the unit
    top = float(np.abs(np.diag(gn)).max())
    gn = gn / top if top > 0 else gn
    k = gn.shape[0]
    best, best_obj, best_m = None, float("inf"), 0
    for mask in range(1, 2**k):
        idx = [i for i in range(k) if mask >> i & 1]
        m = len(idx)
        kkt = np.zeros((m + 1, m + 1))
        kkt[:m, :m] = gn[np.ix_(idx, idx)]
        kkt[:m, m] = 1.0
        kkt[m, :m] = 1.0
        rhs = np.zeros(m + 1)
        rhs[m] = 1.0
        try:
            a_s = np.linalg.solve(kkt, rhs)[:m]
        except np.linalg.LinAlgError:  # singular face (linearly dependent gradients)
            a_s = np.linalg.lstsq(kkt, rhs, rcond=None)[0][:m]
        if not np.isfinite(a_s).all():
            continue
        # a face whose affine minimiser leaves the simplex is skipped: its clipped point below would be feasible
        # and scored exactly, so it could not beat the optimum's own face by more than the tie tolerance below;
        # skipping saves time, and keeps such a point from winning a tie as the wider face
        if a_s.min() < -1e-12 or abs(a_s.sum() - 1.0) > 1e-9:
            continue
        a = np.zeros(k)
        a[idx] = np.clip(a_s, 0.0, None)
        a /= a.sum()
        obj = float(a @ gn @ a)
        # on a tie keep the wider face: two equal gradients share alpha (lstsq's even split), as min_norm_2 splits
        # them 0.5/0.5, where the first vertex (mask order) took all of it
        # (a tie within 1e-12 of the largest squared norm: one relative to the optimum itself never held where the
        # optimum is 0, the gradients' hull holding the origin)
        tie = abs(obj - best_obj) <= 1e-12
        if (obj < best_obj and not tie) or (tie and m > best_m):
            best, best_obj, best_m = a, obj, m
    if best is None:  # cannot happen for a PSD matrix (every vertex is feasible); kept as a guard
        raise RuntimeError("min_norm_simplex: no feasible face found; is the Gram matrix symmetric PSD?")
    return torch.from_numpy(best)


# ---- Gram matrices -------------------------------------------------------------------------------------------------


def nft_output_gram(
    v_theta: torch.Tensor,
    loss_plus: torch.Tensor,
    loss_minus: torch.Tensor,
    r: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """Gram matrix [K, K] of the per-reward NFT loss gradients with respect to the network output v_theta.

    v_theta [B, ...] is the model output the per-sample losses loss_plus/loss_minus [B] were computed from (graph
    kept: uses retain_graph); r [B, K] is each reward's optimality probability. The k-th loss is
    (1/beta)·mean_i(r_ik L+_i + (1 - r_ik) L-_i); see the module docstring for the closed form.
    """
    b = v_theta.shape[0]
    if r.ndim != 2 or r.shape[0] != b:
        raise ValueError(f"nft_output_gram: r must be [B={b}, K], got {tuple(r.shape)}")
    a_grad, b_grad = (
        torch.autograd.grad(loss_plus.sum(), v_theta, retain_graph=True)[0].float().flatten(1),
        torch.autograd.grad(loss_minus.sum(), v_theta, retain_graph=True)[0].float().flatten(1),
    )  # [B, D] each: dL+_i/dv and dL-_i/dv (sample i only touches row i)
    aa = (a_grad * a_grad).sum(1)  # [B]
    ab = (a_grad * b_grad).sum(1)
    bb = (b_grad * b_grad).sum(1)
    p = r.detach().float()  # [B, K]
    q = 1.0 - p
    gram = (
        p.T @ (aa[:, None] * p) + p.T @ (ab[:, None] * q) + q.T @ (ab[:, None] * p) + q.T @ (bb[:, None] * q)
    )
    return (gram / (beta * b) ** 2).double()


def param_gram(
    losses: Sequence[torch.Tensor], params: Sequence[torch.nn.Parameter]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gram matrix of K scalar losses' gradients: G [K, K] (float64) and the flat gradients [K, P] (>= float32).

    One ``autograd.grad`` per loss with retain_graph=True (K backward passes over the graph down to `params`), so pass
    a small parameter list (trainable LoRA weights, or a subset) to keep it cheap. `params` may also be a non-leaf
    tensor such as the model output v_theta: that is the output-space Gram for any objective (e.g. Flow-GRPO's).
    """
    params = [p for p in params if p.requires_grad]
    if not params:
        raise ValueError("param_gram: no trainable parameters given")
    rows = []
    for loss in losses:
        grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
        flat_k = [(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, params)]
        rows.append(torch.cat([f.to(torch.promote_types(f.dtype, torch.float32)) for f in flat_k]))
    flat = torch.stack(rows)  # [K, P]
    return (flat.double() @ flat.double().T), flat


def cosines_with_update(gram_ext: torch.Tensor) -> torch.Tensor:
    """cos(g_k, d) for k < K from the Gram matrix [K+1, K+1] of [g_1, ..., g_K, d] (d = the applied update), in
    [-1, 1]: a Gram whose rounding left a diagonal at 0 beside a cross term of 1e-16 gave a "cosine" of 1e14."""
    g = gram_ext.double()
    norms = g.diagonal().clamp_min(0).sqrt()
    return (g[:-1, -1] / (norms[:-1] * norms[-1]).clamp_min(1e-30)).clamp(-1.0, 1.0).to(torch.float32)


def combination_gram(gram: torch.Tensor, coeffs: torch.Tensor) -> torch.Tensor:
    """Extend G [K, K] of g_1..g_K to [K+1, K+1] with d = sum_k coeffs_k g_k (for :func:`cosines_with_update`)."""
    g = gram.double()
    c = coeffs.double()
    gd = g @ c  # [K]: <g_k, d>
    dd = c @ gd
    top = torch.cat([g, gd[:, None]], dim=1)
    bottom = torch.cat([gd, dd.reshape(1)])[None]
    return torch.cat([top, bottom], dim=0)


# ---- MARBLE --------------------------------------------------------------------------------------------------------


class MarbleBalancer:
    """MARBLE state: EMA'd simplex weights alpha over K normalised per-reward gradients.

    Per update: ``update(gram)`` (when ``needs_refresh()``) solves alpha* on the normalised Gram matrix and EMAs it;
    ``coefficients()`` gives c_k = alpha_k/||g_k|| (weights on the raw per-reward losses) normalised to sum 1;
    ``mix(r)`` gives the amortised per-sample r_mix [B] = r [B, K] @ c; ``diagnostics(gram)`` the cosines.
    """

    def __init__(
        self,
        num_rewards: int,
        ema: float = 0.9,
        refresh_every: int = 1,
        solver: Literal["auto", "projected_gradient"] = "auto",
        names: Sequence[str] | None = None,
    ) -> None:
        if num_rewards < 1:
            raise ValueError("MarbleBalancer: num_rewards must be >= 1")
        self.k = num_rewards
        self.ema = ema
        self.refresh_every = refresh_every
        self.solver = solver
        self.names = list(names) if names is not None else [str(i) for i in range(num_rewards)]
        if len(self.names) != num_rewards:
            raise ValueError("MarbleBalancer: give one name per reward")
        self.alpha = torch.full((num_rewards,), 1.0 / num_rewards, dtype=torch.float64)
        self.alpha_star = self.alpha.clone()
        self.grad_norms = torch.ones(num_rewards, dtype=torch.float64)
        self.steps = 0  # number of update() calls

    def needs_refresh(self, update_step: int) -> bool:
        """True on the updates where the Gram matrix should be recomputed (every `refresh_every`-th, from 0)."""
        return update_step % self.refresh_every == 0

    def update(self, gram: torch.Tensor) -> torch.Tensor:
        """Solve alpha* on the normalised Gram matrix of raw per-reward gradients gram [K, K]; EMA; return alpha."""
        if gram.shape != (self.k, self.k):
            raise ValueError(
                f"MarbleBalancer.update: gram must be [{self.k}, {self.k}], got {tuple(gram.shape)}"
            )
        g = gram.detach().double().cpu()
        norms = g.diagonal().clamp_min(0).sqrt()
        safe = norms.clamp_min(1e-30)
        g_hat = g / (safe[:, None] * safe[None, :])  # Gram of g_k/||g_k||
        dead = norms <= 1e-30  # a reward with zero gradient (all its groups tied): exclude it from the hull
        # no valid sample (e.g. a micro-batch of tied groups): nothing to learn alpha from
        if bool(dead.all()):
            return self.alpha.clone()
        if bool(dead.any()):
            live = (~dead).nonzero().reshape(-1)
            alpha_star = torch.zeros(self.k, dtype=torch.float64)
            alpha_star[live] = min_norm_simplex(g_hat[live][:, live], solver=self.solver)
        else:
            alpha_star = min_norm_simplex(g_hat, solver=self.solver)
        self.alpha_star = alpha_star
        self.alpha = (
            alpha_star.clone() if self.steps == 0 else self.ema * self.alpha + (1.0 - self.ema) * alpha_star
        )
        self.grad_norms = norms
        self.steps += 1
        return self.alpha.clone()

    def coefficients(self, normalize: bool = True) -> torch.Tensor:
        """c_k = alpha_k/||g_k|| [K] (float64), so sum_k c_k g_k = sum_k alpha_k g^_k; normalised to sum 1 by default."""
        c = self.alpha / self.grad_norms.clamp_min(1e-30)
        c = torch.where(self.grad_norms <= 1e-30, torch.zeros_like(c), c)
        if normalize:
            s = c.sum()
            c = c / s if s > 0 else torch.full_like(c, 1.0 / self.k)
        return c

    def mix(self, r: torch.Tensor) -> torch.Tensor:
        """Amortised NFT target: r_mix = sum_k c_k r_k with sum c = 1, so r_mix stays in [0, 1]. r [B, K] -> [B]."""
        if r.ndim != 2 or r.shape[1] != self.k:
            raise ValueError(f"MarbleBalancer.mix: r must be [B, {self.k}], got {tuple(r.shape)}")
        return r @ self.coefficients().to(r.dtype).to(r.device)

    def mix_advantages(self, advantages: torch.Tensor) -> torch.Tensor:
        """A_mix = sum_k c_k A_k [B] for objectives linear in the advantage (Flow-GRPO's loss while the ratio is
        inside the clip range, e.g. the first inner epoch): the gradient of L(A_mix) is sum_k c_k grad L(A_k)."""
        if advantages.ndim != 2 or advantages.shape[1] != self.k:
            raise ValueError(
                f"MarbleBalancer.mix_advantages: need [B, {self.k}], got {tuple(advantages.shape)}"
            )
        return advantages @ self.coefficients().to(advantages.dtype).to(advantages.device)

    def diagnostics(self, gram: torch.Tensor | None = None, prefix: str = "balance") -> dict[str, float]:
        """alpha per reward and, given the Gram matrix of this batch, each reward's cosine with the update."""
        out = {f"{prefix}/alpha/{n}": float(a) for n, a in zip(self.names, self.alpha)}
        if gram is not None:
            cos = cosines_with_update(combination_gram(gram.detach().double().cpu(), self.coefficients()))
            out.update({f"{prefix}/grad_cos/{n}": float(c) for n, c in zip(self.names, cos)})
            out[f"{prefix}/grad_cos_min"] = float(cos.min())
        return out

    def state_dict(self) -> dict[str, object]:
        return {
            "alpha": self.alpha.clone(),
            "grad_norms": self.grad_norms.clone(),
            "steps": self.steps,
            "names": list(self.names),
        }

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore alpha and the gradient norms, matched to the rewards by name when the state records them (older
        states: by position)."""
        alpha = torch.as_tensor(state["alpha"], dtype=torch.float64)
        grad_norms = torch.as_tensor(state["grad_norms"], dtype=torch.float64)
        if alpha.shape != (self.k,):
            raise ValueError(
                f"MarbleBalancer.load_state_dict: saved alpha has {alpha.numel()} rewards, not {self.k}"
            )
        saved = state.get("names")
        if saved is not None:
            saved = [str(n) for n in saved]  # type: ignore[attr-defined]
            if sorted(saved) != sorted(self.names):
                raise ValueError(f"MarbleBalancer.load_state_dict: saved rewards {saved}, not {self.names}")
            order = [saved.index(n) for n in self.names]
            alpha, grad_norms = alpha[order], grad_norms[order]
        self.alpha = alpha
        self.grad_norms = grad_norms
        self.steps = int(state["steps"])  # type: ignore[arg-type]


# ---- trainer integration -------------------------------------------------------------------------------------------


def flat_gradients(losses: Sequence[torch.Tensor], probes: Sequence[torch.Tensor]) -> torch.Tensor:
    """The gradients of each scalar loss with respect to `probes`, flattened: [len(losses), P] float32.

    ``probes`` are leaf parameters (parameter-space gradients) or non-leaf tensors such as the network output
    v_theta (output-space gradients). Every call keeps the graph (retain_graph) for the training backward.
    """
    return param_gram(losses, probes)[1].float()


class UpdateGram:
    """Gram matrix [K+1, K+1] of [g_1, ..., g_K, d] over the micro-batches of one optimizer update.

    ``space="output"``: each micro-batch's rows are gradients with respect to its own network output, i.e.
    disjoint coordinates of the update's output vector, so the update's Gram is the sum of the micro-batch Grams.
    ``space="params"``: the rows are parameter gradients of the same parameters; they are summed, then the Gram.
    """

    def __init__(self, space: Literal["output", "params"]) -> None:
        self.space = space
        self._gram: torch.Tensor | None = None
        self._flat: torch.Tensor | None = None

    def add(self, flat: torch.Tensor) -> None:
        """flat [K+1, P] gradients of one micro-batch."""
        if self.space == "output":
            g = flat.double() @ flat.double().T
            self._gram = g if self._gram is None else self._gram + g
        else:
            self._flat = flat.detach().clone() if self._flat is None else self._flat + flat

    def result(self, reduce: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor | None:
        """The Gram matrix (float64) or None when nothing was added; ``reduce`` sums a tensor over processes."""
        if self.space == "output":
            if self._gram is None:
                return None
            return reduce(self._gram) if reduce is not None else self._gram
        if self._flat is None:
            return None
        flat = reduce(self._flat) if reduce is not None else self._flat
        return flat.double() @ flat.double().T


class RewardBalancing:
    """Per-run state for MARBLE and for the gradient-cosine diagnostics, used by the trainer's update loop.

    Per optimizer update: :meth:`start_update`; per micro-batch :meth:`micro_loss` (one forward, shared by the
    per-reward losses, the Gram matrix and the mixed loss: ONE training backward); :meth:`end_update`; per step
    :meth:`step_metrics`. MARBLE solves alpha* on the Gram matrix of the update's FIRST micro-batch (a random share
    of the batch, after the trainer's shuffle): its first loss term, or all of them summed (``all_terms``:
    :meth:`probe` adds the terms after the first before its :meth:`micro_loss`), EMAs alpha and mixes every
    micro-batch of that update with the same coefficients c. With ``diagnose`` on, every micro-batch also adds its
    [g_1..g_K, d] gradients (d = the gradient of the loss actually back-propagated, regularisers included, before
    AdamW's preconditioning and clipping) to the update's Gram, giving each reward's cosine with the update and the
    running share of updates in which the worst reward's cosine is negative.
    """

    def __init__(
        self,
        names: Sequence[str],
        marble: bool,
        diagnose: bool,
        space: Literal["output", "params"] = "output",
        ema: float = 0.9,
        refresh_every: int = 1,
        solver: Literal["auto", "projected_gradient"] = "auto",
        quiet: bool = False,
    ) -> None:
        self.names = list(names)
        self.k = len(self.names)
        self.balancer = (
            MarbleBalancer(self.k, ema=ema, refresh_every=refresh_every, solver=solver, names=self.names)
            if marble
            else None
        )
        if marble and self.k == 1 and not quiet:  # quiet: a process other than the main one of a launch
            log.warning(
                "rewards.balancer=marble with one reward (%r): its weight is 1 whatever the gradients, so this run "
                "trains on that reward alone and skips MARBLE's gradient probes; name two or more rewards for MARBLE "
                "to balance",
                self.names[0],
            )
        self.diagnose = diagnose
        self.space = space
        self.updates = 0  # optimizer updates seen (MARBLE's refresh clock)
        self.diag_updates = 0  # updates with a cosine measurement
        self.neg_updates = 0  # ... in which the worst reward's cosine was < 0
        self._acc: UpdateGram | None = None
        self._cos: list[torch.Tensor] = []
        self._seconds = 0.0
        # the Gram matrix alpha* is solved on, from start_update to the first micro_loss of a refresh update
        self._solve: UpdateGram | None = None

    def coefficients(self) -> torch.Tensor:
        """Weights c [K] (sum 1) on the per-reward signals; MARBLE only."""
        assert self.balancer is not None
        return self.balancer.coefficients()

    def start_update(self) -> None:
        self._acc = UpdateGram(self.space) if self.diagnose else None
        # one reward: alpha* is [1] on any Gram matrix, so its K probes would be spent for nothing
        refresh = self.balancer is not None and self.k > 1 and self.balancer.needs_refresh(self.updates)
        self._solve = UpdateGram(self.space) if refresh else None

    @property
    def solving(self) -> bool:
        """True from :meth:`start_update` of an update that solves alpha* until its first :meth:`micro_loss`."""
        return self._solve is not None

    def _per_reward_flat(
        self, head: Any, sig: torch.Tensor, params: Sequence[torch.nn.Parameter], scale: float
    ) -> torch.Tensor:
        """[K, P] gradients of the K per-reward policy losses, times the micro-batch's weight in the update."""
        probes = [head.output] if self.space == "output" else list(params)
        return flat_gradients([head.policy(sig[:, j])[0] for j in range(self.k)], probes) * scale

    def probe(
        self, head: Any, per_reward: torch.Tensor, params: Sequence[torch.nn.Parameter], scale: float = 1.0
    ) -> None:
        """Add one more loss term of the first micro-batch (GRPO: another trained SDE step; NFT: another noise draw)
        to the Gram matrix alpha* is solved on; the trainer calls it for every term but the first, before the first
        :meth:`micro_loss`, which adds its own term and solves. No loss, no backward (the head's graph is dropped)."""
        import time

        assert self._solve is not None, "RewardBalancing.probe: only on an update that solves alpha*"
        t0 = time.perf_counter()
        sig = head.to_signal(per_reward.to(head.output.device))  # [b, K]
        self._solve.add(self._per_reward_flat(head, sig, params, scale))
        self._seconds += time.perf_counter() - t0

    def micro_loss(
        self,
        head: Any,
        per_reward: torch.Tensor,
        advantages: torch.Tensor,
        params: Sequence[torch.nn.Parameter],
        reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
        scale: float = 1.0,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """The loss of one micro-batch from an objective's :class:`~imgalign.trainers.objectives.LossHead`.

        per_reward [b, K]: each reward's advantage; advantages [b]: the balancer's (weighted_sum / gdpo; unused by
        MARBLE); params: the parameter-space probes (``space="params"``). ``reduce`` sums over processes.
        ``scale``: the weight the trainer gives this micro-batch's loss in the update (its share of the update's
        valid samples); the gradients enter the Gram matrices with it, so that they are the gradients of the update
        actually made, however the valid samples fall into micro-batches and processes.
        """
        import time

        t0 = time.perf_counter()
        sig = head.to_signal(per_reward.to(head.output.device))  # [b, K]
        probes = [head.output] if self.space == "output" else list(params)
        flat = None
        if self._solve is not None or self.diagnose:  # [K, P]: this micro-batch's share of the update
            flat = self._per_reward_flat(head, sig, params, scale)
        if self._solve is not None:
            # the update's first micro-batch (its other terms probed): the Gram over all its terms (output space:
            # each term's own output, disjoint coordinates, Grams summed; params: gradients summed) -> alpha*
            assert flat is not None and self.balancer is not None
            self._solve.add(flat)
            gram = self._solve.result(reduce)
            self._solve = None
            assert gram is not None
            self.balancer.update(gram)
        if self.balancer is not None:
            signal = sig @ self.coefficients().to(sig.dtype).to(sig.device)  # [b]: the amortised mix
        else:
            signal = head.to_signal(advantages.to(head.output.device))
        loss, metrics = head.total(signal)
        if self.diagnose:
            assert flat is not None and self._acc is not None
            self._acc.add(torch.cat([flat, flat_gradients([loss], probes) * scale]))
        self._seconds += time.perf_counter() - t0
        return loss, metrics

    def end_update(self, reduce: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        self.updates += 1
        gram = self._acc.result(reduce) if self._acc is not None else None
        self._acc = None
        if gram is None:
            return
        cos = cosines_with_update(gram)  # [K]
        self._cos.append(cos)
        self.diag_updates += 1
        self.neg_updates += int(bool(cos.min() < 0))

    def step_metrics(self, prefix: str = "balance") -> dict[str, float]:
        """alpha (MARBLE), each reward's cosine with the update (mean over this step's updates), the worst one, the
        share of this step's updates and the running share of all updates with a negative worst cosine."""
        out: dict[str, float] = {"perf/sec_balance": self._seconds}
        if self.balancer is not None:
            out.update(self.balancer.diagnostics(None, prefix))
            out.update(
                {f"{prefix}/alpha_star/{n}": float(a) for n, a in zip(self.names, self.balancer.alpha_star)}
            )
            out.update({f"{prefix}/coef/{n}": float(c) for n, c in zip(self.names, self.coefficients())})
        if self._cos:
            cos = torch.stack(self._cos)  # [U, K]
            out.update({f"{prefix}/grad_cos/{n}": float(c) for n, c in zip(self.names, cos.mean(0))})
            worst = cos.min(dim=1).values  # [U]
            out[f"{prefix}/grad_cos_min"] = float(worst.mean())
            out[f"{prefix}/neg_cos_share_step"] = float((worst < 0).float().mean())
        if self.diag_updates:
            out[f"{prefix}/neg_cos_share"] = self.neg_updates / self.diag_updates
        self._cos, self._seconds = [], 0.0
        return out

    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "updates": self.updates,
            "diag_updates": self.diag_updates,
            "neg_updates": self.neg_updates,
            "names": list(self.names),
        }
        if self.balancer is not None:
            out["marble"] = self.balancer.state_dict()
        return out

    def state_change(self, state: dict[str, Any]) -> str | None:
        """What of a saved state does not fit these rewards and this balancer (None when it fits). The rewards are
        matched by name, so a reordered list fits; states saved before names were recorded are checked by count."""
        saved = state.get("names")
        if saved is None and "marble" in state:
            saved_k = torch.as_tensor(state["marble"]["alpha"]).numel()
            if saved_k != self.k:
                return f"it has {saved_k} rewards, this run {self.k} ({self.names})"
        if saved is not None and sorted(saved) != sorted(self.names):
            return f"its rewards {list(saved)} are not this run's {self.names}"
        if "marble" in state and self.balancer is None:
            return "it holds MARBLE weights and this run's rewards.balancer is not marble"
        if "marble" not in state and self.balancer is not None:
            return "it has no MARBLE weights (it was trained with another rewards.balancer)"
        return None

    def load_state_dict(self, state: dict[str, Any]) -> str | None:
        """Restore the state; when it does not fit (:meth:`state_change`), leave this one fresh and return why."""
        change = self.state_change(state)
        if change is not None:
            return change
        self.updates = int(state["updates"])
        self.diag_updates = int(state["diag_updates"])
        self.neg_updates = int(state["neg_updates"])
        if self.balancer is not None:
            self.balancer.load_state_dict(state["marble"])
        return None

"""Rewards in the trainer: build them from the registry, score a batch (non-finite scores masked with a warning
naming the reward), and balancers that turn K rewards into one advantage per sample.

Balancer contract (registered in :data:`imgalign.trainers.registry.BALANCERS`)::

    balancer(rewards [K, N], weights [K], group_ids [N], finite [K, N] bool, std_mode, adv_clip) -> Balanced

``Balanced.advantages`` [N] drive the objective; ``per_reward`` [K, N] (each reward's own group-normalised advantage)
is there for balancers such as MARBLE that combine per-reward gradients.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import torch

from imgalign.plugins import ONE_LINE_ERRORS, call_plugin, raised_by_plugin
from imgalign.trainers.grpo import group_advantages
from imgalign.trainers.registry import BALANCERS, call_problem

log = logging.getLogger(__name__)


@dataclass
class Balanced:
    advantages: torch.Tensor  # [N]
    valid: torch.Tensor  # [N] bool
    zero_std_ratio: float
    per_reward: torch.Tensor | None = None  # [K, N]
    metrics: dict[str, float] = field(default_factory=dict)


BALANCER_CONTRACT = (
    "a balancer is a function balancer(rewards [K, N], weights [K], group_ids [N], finite [K, N], std_mode, "
    "adv_clip) -> Balanced(advantages [N], valid [N] bool, zero_std_ratio); see imgalign.trainers.rewarding"
)


def build_balancer(name: str) -> Any:
    """The balancer `name` (registered, or the user's ``package.module:attr``), refused by name with the contract
    when it cannot be called with the six arguments of one (checked before any model loads; was a TypeError
    traceback at the first step)."""
    fn = BALANCERS.get(name)
    problem = call_problem(fn, 6)
    if problem:
        raise ValueError(f"reward balancer {name!r} cannot be called as one: {problem}; {BALANCER_CONTRACT}")
    return fn


def metadata_keys_hint(metadata: list[dict[str, Any]] | None) -> str:
    """What a reward that raised a KeyError was given to read: the keys of its metadata rows."""
    keys = sorted({str(k) for m in metadata or [] if isinstance(m, dict) for k in m})
    if not keys:
        return (
            " (its prompts carry no metadata: give a .jsonl prompts file whose rows hold the keys it reads)"
        )
    return (
        f" (its prompts' metadata rows hold the keys {keys}: a key it reads from them must be in every row)"
    )


def is_plugin_reward(reward: Any) -> bool:
    """Whether `reward` runs the user's code: a plain function, or a Reward class from outside imgalign."""
    from imgalign.rewards.base import FunctionReward

    return isinstance(reward, FunctionReward) or not type(reward).__module__.startswith("imgalign.")


def reward_failure(
    name: str, reward: Any, e: Exception, metadata: list[dict[str, Any]] | None
) -> ValueError | None:
    """A reward's one-line error `e` as a ValueError naming the reward `name`, or None to raise `e` as it is (its own
    message already names it: a built-in's, or imgalign's check of what a plug-in returned)."""
    if isinstance(e, KeyError):
        return raised_by_plugin(f"reward {name!r}", e, metadata_keys_hint(metadata))
    own = str(e).startswith(f"reward {getattr(reward, 'name', name)!r}")
    return None if own or not is_plugin_reward(reward) else raised_by_plugin(f"reward {name!r}", e)


def balance(name: str, fn: Any, *args: Any) -> Balanced:
    """The balancer `fn` (configured as `name`) called with `args`, its result checked (:func:`check_balanced`); a
    plug-in's one-line error is raised naming it."""
    bal = call_plugin(f"reward balancer {name!r}", name, fn, *args)
    return check_balanced(name, bal, args[0].shape[1])


def check_balanced(name: str, bal: Any, n: int) -> Balanced:
    """A balancer's result, refused by name when it is not a :class:`Balanced` with advantages [N] (float) and valid
    [N] (bool) for the N scored samples (was an IndexError or AttributeError traceback inside the update), or with
    a non-finite advantage on a sample it marks valid."""
    if not isinstance(bal, Balanced):
        raise ValueError(
            f"reward balancer {name!r} returned a {type(bal).__name__}, not a Balanced: {BALANCER_CONTRACT}"
        )
    for field_name, want in (("advantages", "float"), ("valid", "bool")):
        t = getattr(bal, field_name)
        ok = isinstance(t, torch.Tensor) and tuple(t.shape) == (n,)
        ok = ok and (t.dtype == torch.bool if want == "bool" else t.is_floating_point())
        if not ok:
            got = f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(
                f"reward balancer {name!r} returned {field_name} as {got}; it must be a {want} tensor of shape "
                f"({n},), one per scored sample: {BALANCER_CONTRACT}"
            )
    # a NaN or infinite advantage of a valid sample made the gradient non-finite: every update was skipped, and the
    # warning named the rollout, the rewards, the objective or the penalty, never the balancer
    bad = bal.valid & ~torch.isfinite(bal.advantages.detach())
    if bad.any():
        raise ValueError(
            f"reward balancer {name!r} returned {int(bad.sum())} non-finite advantage(s) (NaN/inf) for samples it "
            f"marks valid (e.g. sample {int(bad.nonzero()[0])}: {float(bal.advantages[bad][0])}); an advantage must be "
            f"finite, or its sample marked valid=False to leave it out: {BALANCER_CONTRACT}"
        )
    return bal


def same_reward_twice(specs: list[str]) -> tuple[str, str] | None:
    """The first two specs naming the same reward with the same options (their canonical
    :func:`imgalign.rewards.base.reward_key`: ``geneval`` and ``geneval: mode=partial``; a file option by its
    resolved path, :func:`imgalign.rewards.base.same_reward_key`), or None."""
    from imgalign.rewards.base import same_reward_key

    seen: dict[str, str] = {}
    for spec in specs:
        key = same_reward_key(spec)
        if key in seen:
            return seen[key], spec
        seen[key] = spec
    return None


def metric_safe(key: str) -> str:
    """A canonical reward key as a metric-name part every tracker takes (MLflow: letters, digits, _ . - : space and
    /; no / either, which would nest the name): other characters become _ (geneval:mode=strict -> geneval:mode_strict)."""
    return re.sub(r"[^\w.\- :]", "_", key)


def metric_names(specs: list[str], names: list[str | None]) -> list[str]:
    """The metric name of each reward (``reward/<name>/mean``, rewards.pt, balance/*): its ``name`` attribute
    (``geneval``) when no other reward of the run has that name, else its canonical key, each made tracker-safe
    (:func:`metric_safe`: ``geneval:mode_strict`` and ``geneval``; a user reward's ``name='judge/v2'`` is
    ``judge_v2``), so a name never depends on the order of the list. specs: distinct rewards."""
    from imgalign.rewards.base import reward_key

    keys = [metric_safe(reward_key(s)) for s in specs]
    own = [metric_safe(n) if n else k for k, n in zip(keys, names)]  # a name 'judge/v2' nested the metric
    out = [n if own.count(n) == 1 else k for k, n in zip(keys, own)]
    if len(set(out)) < len(out):  # a unique name equal to another reward's key: every reward by its key
        out = list(keys)
    for i, n in enumerate(out):  # two keys made equal by metric_safe (a=b, a,b): numbered in list order
        if out[:i].count(n):
            out[i] = f"{n}_{out[:i].count(n) + 1}"
    return out


def build_rewards(specs: list[str], device: str | torch.device = "cpu") -> dict[str, Any]:
    """metric name (:func:`metric_names`) -> reward object, for every spec; the same reward twice is refused."""
    from imgalign.rewards.base import build_reward

    twice = same_reward_twice(specs)
    if twice:
        raise ValueError(f"rewards {twice[0]!r} and {twice[1]!r} are the same reward with the same options")
    built = [build_reward(spec, device=device) for spec in specs]
    names = metric_names(specs, [getattr(r, "name", None) for r in built])
    return dict(zip(names, built))


def reward_output(
    name: str, reward: Any, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]] | None
) -> Any:
    """``reward(images, prompts, metadata)`` (a RewardOutput); a plug-in's one-line error is raised naming the reward
    `name` (:func:`reward_failure`)."""
    try:
        return reward(images, prompts, metadata)
    except ONE_LINE_ERRORS as e:
        failure = reward_failure(name, reward, e, metadata)
        if failure is None:
            raise
        raise failure from e


def score_all(
    rewards: dict[str, Any],
    images: torch.Tensor,
    prompts: list[str],
    metadata: list[dict[str, Any]],
    known_bad: torch.Tensor | None = None,
    logged_only: Collection[str] = (),
) -> torch.Tensor:
    """[K, B] float32 scores; a NaN or infinite score stays in place (the caller masks it) and is warned about by
    reward name, except on the rows of `known_bad` [B] (non-finite images, already warned about). The rewards named
    in `logged_only` (weight 0) mask no sample, and their warning says so (:func:`balancer_inputs`)."""
    rows = []
    for name, r in rewards.items():
        s = reward_output(name, r, images, prompts, metadata).scores.detach().float().reshape(-1).cpu()
        bad = ~torch.isfinite(s)
        if known_bad is not None:
            bad &= ~known_bad.cpu()
        if bad.any():
            log.warning(
                "reward %r returned %d non-finite score(s) (NaN/inf) for prompt(s) %s; %s",
                name,
                int(bad.sum()),
                sorted({prompts[i] for i in bad.nonzero().flatten().tolist()})[:3],
                "it has weight 0 (logged only), so no sample is masked for them"
                if name in logged_only
                else "those samples are masked out of the advantages and the loss",
            )
        rows.append(s)
    return torch.stack(rows)


def balancer_inputs(
    scores: torch.Tensor, finite: torch.Tensor, weights: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The scores and finite mask [K, N] a balancer is given. A reward of weight 0 is only logged: its non-finite
    scores mask no sample (one that failed on every sample stopped all training). They enter as 0, marked finite,
    and a weight of 0 takes them out of every built-in balancer's combination; a non-finite score of a reward with
    weight > 0 still masks its sample. scores, finite: [K, N]; weights: [K]."""
    skip = (weights.view(-1, 1) == 0) & ~finite  # [K, N]
    return torch.where(skip, torch.zeros_like(scores), scores), finite | skip


def reward_stats(
    scores: torch.Tensor, finite: torch.Tensor, names: list[str], weights: torch.Tensor | None = None
) -> dict[str, float]:
    """Per-reward batch statistics over the finite scores: ``reward/<name>/mean``, ``/std`` (population),
    ``/nonfinite`` (how many scores were NaN or inf) and ``/masked`` (how many samples those masked: all of them, or
    none for a reward of weight 0 in `weights` [K], which is only logged). scores, finite: [K, N]; a reward with no
    finite score has NaN mean/std."""
    out: dict[str, float] = {}
    for k, name in enumerate(names):
        s = scores[k][finite[k]].float()
        out[f"reward/{name}/mean"] = float(s.mean()) if s.numel() else float("nan")
        out[f"reward/{name}/std"] = float(s.std(unbiased=False)) if s.numel() else float("nan")
        out[f"reward/{name}/nonfinite"] = float((~finite[k]).sum())
        logged_only = weights is not None and float(weights[k]) == 0
        out[f"reward/{name}/masked"] = 0.0 if logged_only else out[f"reward/{name}/nonfinite"]
    return out


def reward_means_by_tag(
    scores: torch.Tensor, finite: torch.Tensor, names: list[str], metadata: list[dict[str, Any]]
) -> dict[str, float]:
    """Per-task training reward: ``reward_by_tag/<name>/<tag>`` = mean of the finite scores of the samples whose
    metadata has that ``tag`` (GenEval's task names). scores, finite: [K, N]; metadata: N dicts. Samples without a
    tag are left out; with no tags at all the dict is empty."""
    tags = [md.get("tag") if md else None for md in metadata]
    out: dict[str, float] = {}
    for tag in sorted({t for t in tags if t}):
        rows = torch.tensor([t == tag for t in tags])  # [N] bool
        for k, name in enumerate(names):
            s = scores[k][rows & finite[k]]
            if s.numel():
                out[f"reward_by_tag/{name}/{tag}"] = float(s.mean())
    return out


def _group_normalise(r: torch.Tensor, gid: torch.Tensor, ok: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """(r − group mean)/(group std + eps) over the finite members of each group; 0 elsewhere. [N] -> [N]."""
    out = torch.zeros_like(r)
    for g in torch.unique(gid):
        m = (gid == g) & ok
        if m.sum() >= 1:
            x = r[m]
            out[m] = (x - x.mean()) / (x.std(unbiased=False) + eps)
    return out


@BALANCERS.register("group_norm_weighted")
def group_norm_weighted(
    rewards: torch.Tensor,
    weights: torch.Tensor,
    group_ids: torch.Tensor,
    finite: torch.Tensor,
    std_mode: str = "group",
    adv_clip: float | None = 5.0,
) -> Balanced:
    """Each reward normalised within its group (so scales cannot dominate), weighted sum, then GRPO advantages of
    the sum. With one reward this equals plain GRPO advantages of that reward."""
    ok = finite.all(dim=0)
    r = torch.where(finite, rewards, torch.zeros_like(rewards))
    per = torch.stack([_group_normalise(r[k], group_ids, ok) for k in range(r.shape[0])])
    combined = (weights.view(-1, 1) * per).sum(dim=0) if r.shape[0] > 1 else r[0]
    adv = group_advantages(combined, group_ids, std_mode, adv_clip, finite=ok)  # type: ignore[arg-type]
    return Balanced(adv.advantages, adv.valid, adv.zero_std_ratio, per)


@BALANCERS.register("weighted_sum")
def weighted_sum(
    rewards: torch.Tensor,
    weights: torch.Tensor,
    group_ids: torch.Tensor,
    finite: torch.Tensor,
    std_mode: str = "group",
    adv_clip: float | None = 5.0,
) -> Balanced:
    """The reference code's default: raw scores summed with fixed weights, then GRPO advantages."""
    ok = finite.all(dim=0)
    r = torch.where(finite, rewards, torch.zeros_like(rewards))
    combined = (weights.view(-1, 1) * r).sum(dim=0)
    adv = group_advantages(combined, group_ids, std_mode, adv_clip, finite=ok)  # type: ignore[arg-type]
    return Balanced(adv.advantages, adv.valid, adv.zero_std_ratio, None)


@BALANCERS.register("gdpo")
def gdpo(
    rewards: torch.Tensor,
    weights: torch.Tensor,
    group_ids: torch.Tensor,
    finite: torch.Tensor,
    std_mode: str = "group",
    adv_clip: float | None = 5.0,
) -> Balanced:
    """GDPO (algorithms.md §6; :func:`imgalign.trainers.balance.gdpo_advantages`): each reward normalised within
    its group, weighted sum, then normalised over the batch. Non-finite samples are left out of every statistic, and
    a group in which every reward of weight > 0 ties is dropped (not valid, out of the batch statistics), as every
    other balancer drops it: it carries no signal, and keeping it would dilute the masked means and shrink the batch
    std."""
    from imgalign.trainers.balance import gdpo_advantages, group_normalize

    ok = finite.all(dim=0)
    adv = torch.zeros(rewards.shape[1])
    per = torch.zeros_like(rewards)
    groups = torch.unique(group_ids)
    valid = ok.clone()
    # a reward of weight 0 (logged only) gives no signal: one that varies in a group whose weighted rewards all tie
    # kept that group, its 0 advantages in the batch statistics (the other groups' advantages scaled up)
    # all weights 0: no reward of weight > 0, so every group is dropped, as weighted_sum and group_norm_weighted drop
    # it (it kept every group whose logged-only rewards varied, valid with advantage 0)
    weighted = (weights != 0).to(rewards.device)  # [K]
    for g in groups:
        m = (group_ids == g) & ok
        r_g = rewards[weighted][:, m]  # [K', n_g]: the rewards of weight > 0
        if r_g.shape[1] < 2 or bool((r_g.amax(dim=1) == r_g.amin(dim=1)).all()):
            valid[group_ids == g] = False  # every weighted reward ties (or a single finite member): no signal
    std = "group" if std_mode == "group" else "global"
    idx = ok.nonzero().flatten()
    if idx.numel():
        per[:, idx] = group_normalize(rewards[:, idx].T.float(), group_ids[idx], std=std).T
    idx = valid.nonzero().flatten()
    if idx.numel():
        r = rewards[:, idx].T.float()  # [n, K]
        adv[idx] = gdpo_advantages(r, group_ids[idx], weights.tolist(), std=std, clip=adv_clip or 0.0)
    tied = sum(1 for g in groups if not bool(valid[group_ids == g].any()))
    return Balanced(adv, valid, tied / max(len(groups), 1), per)


def per_reward_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    finite: torch.Tensor,
    std_mode: str = "group",
    adv_clip: float | None = 5.0,
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Each reward's own GRPO advantage (normalised within its group, clipped): the signal of each per-reward gradient.

    rewards, finite [K, N]; group_ids [N] -> (advantages [K, N], valid [N], zero_std_ratio). A sample is valid when
    every reward of it is finite and at least one reward varies in its group; a reward that ties in a group gives 0
    there (for NFT: r = 1/2). zero_std_ratio is the share of groups in which every reward ties.
    """
    ok = finite.all(dim=0)
    per, valid = [], torch.zeros_like(ok)
    for k in range(rewards.shape[0]):
        adv = group_advantages(rewards[k], group_ids, std_mode, adv_clip, finite=ok)  # type: ignore[arg-type]
        per.append(adv.advantages)
        valid |= adv.valid
    groups = torch.unique(group_ids)
    tied = sum(1 for g in groups if not bool(valid[group_ids == g].any()))
    return torch.stack(per), valid & ok, tied / max(len(groups), 1)


@BALANCERS.register("marble")
def marble(
    rewards: torch.Tensor,
    weights: torch.Tensor,
    group_ids: torch.Tensor,
    finite: torch.Tensor,
    std_mode: str = "group",
    adv_clip: float | None = 5.0,
) -> Balanced:
    """MARBLE (algorithms.md §6): per-reward group-normalised advantages; the trainer mixes them with the EMA'd
    min-norm simplex weights of the per-reward gradients (:class:`imgalign.trainers.balance.MarbleBalancer`).

    ``advantages`` here is the weighted mean of the per-reward advantages (weights normalised to sum 1), only a
    placeholder for logging and for callers without MARBLE support; the trainer replaces it. ``weights`` do not
    enter MARBLE's direction (the min-norm point is scale-free per reward)."""
    per, valid, tied = per_reward_advantages(rewards, group_ids, finite, std_mode, adv_clip)
    w = weights.float() / weights.float().sum().clamp_min(1e-12)
    return Balanced((w.view(-1, 1) * per).sum(dim=0), valid, tied, per)

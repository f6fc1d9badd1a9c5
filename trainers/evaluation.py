"""Evaluation during training: the shapes GenEval suite (a fixed, seeded subset of ``prompts/shapes_geneval.jsonl``
sampled with the deterministic ODE and judged by the shapes detector), or the mean rewards on held-out prompts.

The full suite with the project's reference sampler is ``imgalign eval --suite shapes --model <checkpoint>``; this
in-loop version uses the same prompts and judge on fewer images so it fits inside a training run.
"""

from __future__ import annotations

from typing import Any

import torch

from imgalign.adapters import FlowAdapter
from imgalign.trainers import kernels as K
from imgalign.trainers.config import EvalConfig
from imgalign.trainers.prompting import _mix
from imgalign.trainers.rewarding import reward_output


@torch.no_grad()
def ode_sample(
    adapter: FlowAdapter,
    model: torch.nn.Module,
    prompts: list[str],
    seeds: list[int],
    num_steps: int,
    guidance_scale: float,
    batch_size: int = 16,
) -> torch.Tensor:
    """Deterministic Euler-ODE samples, one per (prompt, seed): images [B, 3, H, W] in [0, 1]."""
    out = []
    sig = adapter.sigmas(num_steps).to(adapter.device)
    for s in range(0, len(prompts), batch_size):
        ps, ss = prompts[s : s + batch_size], seeds[s : s + batch_size]
        x = adapter.init_noise([torch.Generator().manual_seed(int(z)) for z in ss])
        cond = adapter.encode(ps)
        for i in range(num_steps):
            v = adapter.velocity(x, sig[i], cond, guidance_scale, transformer=model)
            x = K.ode_step(x, v, sig[i], sig[i + 1]).prev_sample
        out.append(adapter.decode(x).cpu())
    return torch.cat(out)


def shapes_eval_set(prompts_per_task: int) -> list[dict[str, Any]]:
    """`prompts_per_task` prompts of each task of the shapes eval set (fixed order): distinct prompts first (in file
    order, cycling when a task has fewer), with the task's held-out colour pairs in the share the whole set has
    (a third of colours and colour attribution). The file lists those held-out prompts first, so the first prompts
    alone would all have been held-out ones."""
    from imgalign import shapes as W
    from imgalign.prompts.io import load_geneval_metadata
    from imgalign.prompts.shapes import EVAL_SET_PATH

    def held_out(m: dict[str, Any]) -> bool:
        return any(c.get("color") and (c["color"], c["class"]) in W.HELD_OUT_PAIRS for c in m["include"])

    def pick(items: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
        distinct: dict[str, dict[str, Any]] = {}
        for m in items:
            distinct.setdefault(m["prompt"], m)
        d = list(distinct.values())
        return [d[i % len(d)] for i in range(n)] if d else []

    by_tag: dict[str, list[dict[str, Any]]] = {}
    for m in load_geneval_metadata(EVAL_SET_PATH):
        by_tag.setdefault(m["tag"], []).append(m)
    out = []
    for items in by_tag.values():
        n = min(prompts_per_task, len(items))
        held = [m for m in items if held_out(m)]
        seen = [m for m in items if not held_out(m)]
        n_held = round(n * len(held) / len(items)) if seen else n
        out += pick(held, n_held) + pick(seen, n - n_held)
    return out


def eval_prompt_pool(cfg: EvalConfig, test_prompts: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The evaluation's prompts in the order the extra measurements take them: for the shapes suite, its eval-set
    prompts round-robin over the tasks (one per task in turn); for the reward suite, the held-out prompts."""
    if cfg.suite != "shapes":
        return [p for p, _ in test_prompts]
    by_task: dict[str, list[str]] = {}
    for m in shapes_eval_set(cfg.prompts_per_task):
        by_task.setdefault(m["tag"], []).append(m["prompt"])
    return [p for group in zip(*by_task.values()) for p in group]


def shapes_suite(
    adapter: FlowAdapter, model: torch.nn.Module, cfg: EvalConfig, guidance_scale: float
) -> tuple[dict[str, float], torch.Tensor]:
    """GenEval-protocol scores on the shapes eval subset: ``eval/shapes/overall`` and one entry per task."""
    from imgalign.eval.geneval import judge, summarize
    from imgalign.eval.shapes_detector import ShapesDetector
    from imgalign.rewards.base import to_pil

    metas = shapes_eval_set(cfg.prompts_per_task)
    prompts, seeds, rows_meta = [], [], []
    for i, m in enumerate(metas):
        for j in range(cfg.images_per_prompt):
            prompts.append(m["prompt"])
            seeds.append(_mix(cfg.seed, i, j))
            rows_meta.append(m)
    images = ode_sample(adapter, model, prompts, seeds, cfg.num_steps, guidance_scale)
    det = ShapesDetector()
    rows = []
    partial = []
    for img, m in zip(to_pil(images), rows_meta):
        j = judge(img, det(img), m)
        rows.append({"tag": m["tag"], "correct": j.correct})
        partial.append(j.partial)
    overall, tasks = summarize(rows)
    out = {"eval/shapes/overall": overall, "eval/shapes/partial": float(sum(partial) / len(partial))}
    out.update({f"eval/shapes/{t}": v for t, v in tasks.items()})
    return out, images


def reward_suite(
    adapter: FlowAdapter,
    model: torch.nn.Module,
    cfg: EvalConfig,
    guidance_scale: float,
    rewards: dict[str, Any],
    prompts: list[tuple[str, dict[str, Any]]],
) -> tuple[dict[str, float], torch.Tensor]:
    """Mean of every training reward on held-out prompts (ODE samples)."""
    ps, ms, seeds = [], [], []
    for i, (p, m) in enumerate(prompts):
        for j in range(cfg.images_per_prompt):
            ps.append(p)
            ms.append(m)
            seeds.append(_mix(cfg.seed, i, j))
    if not ps:
        return {}, torch.empty(0)
    images = ode_sample(adapter, model, ps, seeds, cfg.num_steps, guidance_scale)
    out = {}
    for name, r in rewards.items():
        s = reward_output(name, r, images, ps, ms).scores.float()
        if torch.isfinite(s).any():  # none finite (fid before its set has members): no mean, not a made-up 0
            out[f"eval/reward/{name}/mean"] = float(s[torch.isfinite(s)].mean())
    return out, images


def prompt_dependence(images: torch.Tensor) -> dict[str, float]:
    """How much the prompt moves the image compared with the noise seed.

    ``images``: [P, S, C, H, W], prompt p drawn from seed s (the same S seeds for every prompt), P, S >= 2.
    ``prompt`` = mean |x[p, s] - x[q, s]| over prompt pairs p < q at a fixed seed; ``seed`` = mean |x[p, s] - x[p, t]|
    over seed pairs s < t at a fixed prompt; ``ratio`` = prompt / seed. A model that reads its prompts changes the
    picture when the prompt changes (ratio of order 1 or more); a ratio near 0 means the prompt is ignored, which is
    what reward hacking by a prompt-independent texture looks like (see examples/shapes/README.md).
    """
    P, S = images.shape[:2]
    if P < 2 or S < 2:
        raise ValueError(
            f"prompt_dependence needs >= 2 prompts and >= 2 seeds, got images of shape {tuple(images.shape)}"
        )
    x = images.float().flatten(2)  # [P, S, D]
    d_prompt = (x[:, None] - x[None, :]).abs().mean(-1)  # [P, P, S]
    d_seed = (x[:, :, None] - x[:, None, :]).abs().mean(-1)  # [P, S, S]
    iu_p = torch.triu_indices(P, P, 1)
    iu_s = torch.triu_indices(S, S, 1)
    mp = float(d_prompt[iu_p[0], iu_p[1]].mean())
    ms = float(d_seed[:, iu_s[0], iu_s[1]].mean())
    return {"prompt": mp, "seed": ms, "ratio": mp / max(ms, 1e-12)}


def eval_prompt_dependence(
    adapter: FlowAdapter,
    model: torch.nn.Module,
    cfg: EvalConfig,
    guidance_scale: float,
    test_prompts: list[tuple[str, dict[str, Any]]],
) -> dict[str, float]:
    """``eval/prompt_dependence/{prompt,seed,ratio}`` for the trainer's evaluation: ``cfg.prompt_dependence_prompts``
    distinct prompts (shapes suite: its tasks in turn; reward suite: the held-out prompts) x the same
    ``cfg.prompt_dependence_seeds`` seeds, ODE-sampled like the suite. Empty when off or when fewer than 2 prompts."""
    n_p, n_s = cfg.prompt_dependence_prompts, cfg.prompt_dependence_seeds
    if n_p <= 0:
        return {}
    pool = eval_prompt_pool(cfg, test_prompts)
    prompts = list(dict.fromkeys(pool))[:n_p]
    if len(prompts) < 2:
        return {}
    seeds = [_mix(cfg.seed, 20_000 + s, 0) for s in range(n_s)]
    flat_p = [p for p in prompts for _ in seeds]
    flat_s = [s for _ in prompts for s in seeds]
    images = ode_sample(adapter, model, flat_p, flat_s, cfg.num_steps, guidance_scale)
    d = prompt_dependence(images.view(len(prompts), n_s, *images.shape[1:]))
    return {f"eval/prompt_dependence/{k}": v for k, v in d.items()}

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
    """The first `prompts_per_task` prompts of each task of the shapes eval set (fixed order)."""
    from imgalign.prompts.io import load_geneval_metadata
    from imgalign.prompts.shapes import EVAL_SET_PATH

    by_tag: dict[str, list[dict[str, Any]]] = {}
    for m in load_geneval_metadata(EVAL_SET_PATH):
        by_tag.setdefault(m["tag"], []).append(m)
    return [m for tag in by_tag for m in by_tag[tag][:prompts_per_task]]


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
        s = r(images, ps, ms).scores.float()
        out[f"eval/reward/{name}/mean"] = (
            float(s[torch.isfinite(s)].mean()) if torch.isfinite(s).any() else 0.0
        )
    return out, images

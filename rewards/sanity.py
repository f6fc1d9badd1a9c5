"""Sanity checks for prompt-conditioned rewards on the shapes world: does a reward score an exact render's true
prompt above a minimally corrupted one (a different shape, colour, count or relation)?"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch

from imgalign import shapes as W

OPPOSITE = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}


def corrupt_spec(spec: W.Spec, rng: random.Random) -> W.Spec:
    """A spec of the same task that the render of `spec` does not satisfy: one attribute changed."""
    inc = spec.include
    other = lambda values, cur: rng.choice([v for v in values if v != cur])  # noqa: E731
    if spec.tag == "single_object":
        return W.single_object(other(W.SHAPES, inc[0].shape))
    if spec.tag == "two_object":
        a, b = inc[0].shape, inc[1].shape
        new = rng.choice([s for s in W.SHAPES if s not in (a, b)])
        return W.two_object(new, b) if rng.random() < 0.5 else W.two_object(a, new)
    if spec.tag == "counting":
        c = inc[0]
        if rng.random() < 0.5:
            return W.counting(c.shape, other((2, 3, 4), c.count))
        return W.counting(other(W.SHAPES, c.shape), c.count)
    if spec.tag == "colors":
        c = inc[0]
        return W.colors(other(list(W.COLORS), c.color), c.shape)
    if spec.tag == "position":
        target, mover = inc[0], inc[1]
        assert mover.position is not None
        return W.position(mover.shape, OPPOSITE[mover.position[0]], target.shape)
    if spec.tag == "color_attr":
        a, b = inc[0], inc[1]
        if a.color != b.color:  # swap the colours between the two objects
            return W.color_attr(b.color, a.shape, a.color, b.shape)
        return W.color_attr(other(list(W.COLORS), a.color), a.shape, b.color, b.shape)
    raise ValueError(f"cannot corrupt a spec with tag {spec.tag!r}")


@dataclass
class PairResult:
    accuracy: float  # share of pairs with score(true) > score(corrupted)
    n: int
    per_task: dict[str, float]
    mean_true: float
    mean_corrupted: float


def true_vs_corrupted(reward: Any, n: int = 240, seed: int = 0, batch_size: int = 32) -> PairResult:
    """Render `n` seeded eval-style specs (all six tasks), score each image with its true prompt and with a
    corrupted one; ties count as failures."""
    from imgalign.prompts.shapes import sample_training_specs

    rng = random.Random(seed)
    specs = sample_training_specs(n, seed=seed)
    bad = [corrupt_spec(s, rng) for s in specs]
    images = W.render_tensor(specs, seed=seed)
    wins, true_all, bad_all = [], [], []
    for i in range(0, n, batch_size):
        sl = slice(i, i + batch_size)
        t = reward(images[sl], [s.prompt() for s in specs[sl]], [s.to_metadata() for s in specs[sl]]).scores
        c = reward(images[sl], [s.prompt() for s in bad[sl]], [s.to_metadata() for s in bad[sl]]).scores
        wins.append(t > c)
        true_all.append(t)
        bad_all.append(c)
    w = torch.cat(wins).float()
    per_task: dict[str, list[float]] = {}
    for s, v in zip(specs, w.tolist()):
        per_task.setdefault(s.tag, []).append(v)
    return PairResult(
        accuracy=float(w.mean()),
        n=n,
        per_task={k: sum(v) / len(v) for k, v in sorted(per_task.items())},
        mean_true=float(torch.cat(true_all).mean()),
        mean_corrupted=float(torch.cat(bad_all).mean()),
    )

"""Sanity checks for prompt-conditioned rewards on the shapes world: does a reward score an exact render's true
prompt above a minimally corrupted one (a different shape, colour, count or relation)?"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

import torch

from imgalign import shapes as W

OPPOSITE = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}


KINDS = ("shape", "colour", "count", "relation", "swap")


def applicable_kinds(spec: W.Spec) -> list[str]:
    """Corruptions that apply to `spec`: shape always; colour if a clause is coloured; count for counting;
    relation for position; swap (exchange two different colours, a binding test) for color_attr."""
    kinds = ["shape"]
    if any(c.color for c in spec.include):
        kinds.append("colour")
    if spec.tag == "counting":
        kinds.append("count")
    if spec.tag == "position":
        kinds.append("relation")
    if spec.tag == "color_attr" and spec.include[0].color != spec.include[1].color:
        kinds.append("swap")
    return kinds


def corrupt_spec(spec: W.Spec, rng: random.Random, kinds: tuple[str, ...] = KINDS) -> tuple[W.Spec, str]:
    """A spec of the same task that the exact render of `spec` does not satisfy, and the kind of change: one
    clause's shape (kept distinct from the other clause's), one colour, the count, the relation (to its opposite),
    or the two colours swapped. The kind is drawn uniformly from those in `kinds` that apply."""
    options = [k for k in applicable_kinds(spec) if k in kinds] or ["shape"]
    kind = rng.choice(options)
    inc = list(spec.include)
    if kind == "shape":
        i = rng.randrange(len(inc))
        new = rng.choice([s for s in W.SHAPES if s not in {c.shape for c in inc}])
        inc[i] = W.Clause(new, inc[i].count, inc[i].color, inc[i].position)
        exclude = tuple((new, n) if s == spec.include[i].shape else (s, n) for s, n in spec.exclude)
        return W.Spec(spec.tag, tuple(inc), exclude), kind
    if kind == "colour":
        i = rng.choice([k for k, c in enumerate(inc) if c.color])
        # only the colour: a clause placed relative to another keeps its place
        inc[i] = replace(inc[i], color=rng.choice([c for c in W.COLORS if c != inc[i].color]))
        return W.Spec(spec.tag, tuple(inc), spec.exclude), kind
    if kind == "count":
        c = inc[0]
        return W.counting(c.shape, rng.choice([k for k in (2, 3, 4) if k != c.count])), kind
    if kind == "relation":
        target, mover = inc
        assert mover.position is not None
        return W.position(mover.shape, OPPOSITE[mover.position[0]], target.shape), kind
    a, b = inc  # swap
    return W.color_attr(b.color, a.shape, a.color, b.shape), kind


@dataclass
class PairResult:
    accuracy: float  # share of pairs with score(true) > score(corrupted)
    n: int
    per_task: dict[str, float]
    per_kind: dict[str, float]
    mean_true: float  # over the pairs whose two scores are finite (nan when there are none)
    mean_corrupted: float
    n_nonfinite: int = 0  # pairs with a NaN/inf score (either prompt); they count as failures


def check_kinds(kinds: tuple[str, ...]) -> None:
    """`kinds` names corruption kinds, each one of :data:`KINDS`: an unknown one (or a string, read letter by letter)
    applied to no spec, and the check failed with "sample_training_specs: no tasks given", naming no kind."""
    if isinstance(kinds, str) or not kinds or any(k not in KINDS for k in kinds):
        raise ValueError(
            f"true_vs_corrupted: kinds must be a tuple of corruption kinds, some of {', '.join(KINDS)} (got {kinds!r})"
        )


def checkable_specs(n: int, seed: int, kinds: tuple[str, ...]) -> list[W.Spec]:
    """`n` seeded training specs that one of `kinds` applies to, from the tasks it applies to. A task may hold specs
    it does not apply to (swap: color_attr prompts of one colour twice); those are drawn again, with the next seed,
    instead of falling back to a shape change (``--kinds swap`` measured 16% shape changes). With the default kinds,
    the specs of :func:`imgalign.prompts.shapes.sample_training_specs` as they are."""
    from imgalign.prompts.shapes import all_specs, sample_training_specs

    def applies(spec: W.Spec) -> bool:
        return bool(set(applicable_kinds(spec)) & set(kinds))

    tasks = [t for t in W.TASKS if any(applies(s) for s in all_specs(t, "train"))]
    specs: list[W.Spec] = []
    draw = seed
    while len(specs) < n:  # each task holds a spec a kind applies to: every draw keeps some
        specs += [s for s in sample_training_specs(n, seed=draw, tasks=tasks) if applies(s)]
        draw += 1
    return specs[:n]


def true_vs_corrupted(
    reward: Any, n: int = 240, seed: int = 0, batch_size: int = 32, kinds: tuple[str, ...] = KINDS
) -> PairResult:
    """Render `n` seeded training specs, score each image with its true prompt and with a corrupted one
    (:func:`corrupt_spec` restricted to `kinds`); ties and non-finite scores count as failures. The specs are those
    one of `kinds` applies to (:func:`checkable_specs`: all six tasks for the default kinds; counting alone for
    ``("count",)``), so a restricted check measures those corruptions, not shape changes."""
    # n=0 failed inside torch.cat ("expected a non-empty list of Tensors"), batch_size=0 inside range()
    for label, value in (("n", n), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(
                f"true_vs_corrupted: {label} must be a whole number of at least 1 (got {value!r})"
            )
    check_kinds(kinds)
    rng = random.Random(seed)
    specs = checkable_specs(n, seed, kinds)
    pairs = [corrupt_spec(s, rng, kinds) for s in specs]
    bad, bad_kinds = [p[0] for p in pairs], [p[1] for p in pairs]
    images = W.render_tensor(specs, seed=seed)
    wins, true_all, bad_all = [], [], []
    for i in range(0, n, batch_size):
        sl = slice(i, i + batch_size)
        t = reward(images[sl], [s.prompt() for s in specs[sl]], [s.to_metadata() for s in specs[sl]]).scores
        c = reward(images[sl], [s.prompt() for s in bad[sl]], [s.to_metadata() for s in bad[sl]]).scores
        wins.append(t > c)
        true_all.append(t)
        bad_all.append(c)
    t, c = torch.cat(true_all), torch.cat(bad_all)
    finite = torch.isfinite(t) & torch.isfinite(c)  # [n]
    w = (torch.cat(wins) & finite).float()  # a finite score above -inf is no win
    per_task: dict[str, list[float]] = {}
    per_kind: dict[str, list[float]] = {}
    for s, k, v in zip(specs, bad_kinds, w.tolist()):
        per_task.setdefault(s.tag, []).append(v)
        per_kind.setdefault(k, []).append(v)
    return PairResult(
        accuracy=float(w.mean()),
        n=n,
        per_task={k: sum(v) / len(v) for k, v in sorted(per_task.items())},
        per_kind={k: sum(v) / len(v) for k, v in sorted(per_kind.items())},
        mean_true=float(t[finite].mean()),
        mean_corrupted=float(c[finite].mean()),
        n_nonfinite=int((~finite).sum()),
    )

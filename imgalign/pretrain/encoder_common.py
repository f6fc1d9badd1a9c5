"""Data, captions, schedules and checkpoints shared by the CLIP and VLM pretraining (``clip.py``, ``vlm.py``).

Training batches are a pure function of ``(seed, step)``: a resumed run sees exactly the images and captions an
uninterrupted run would. Evaluation renders come from a separate seed stream (:func:`heldout_seed`), so they are
layouts the model never saw during training.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from imgalign import shapes as W
from imgalign.pretrain import config_changes, load_state, writing
from imgalign.prompts.shapes import sample_training_specs

CAPTION_KINDS: tuple[str, ...] = ("prompt", "full", "shapes", "colours")


def heldout_seed(seed: int) -> int:
    """Seed of the evaluation stream (a different stream from every training step's)."""
    return (seed * 7919 + 0x5EED_0000) & 0x7FFFFFFF


def step_seed(seed: int, step: int) -> int:
    """Seed of training step `step` (its specs, layouts and caption choices)."""
    return (seed * 1_000_003 + step * 9973 + 17) & 0x7FFFFFFF


def describe(objs: list[W.PlacedObject], with_shape: bool = True, with_colour: bool = True) -> str:
    """A caption naming every rendered object, grouped by (colour, shape) in order of first appearance.

    >>> describe([W.PlacedObject("circle", "red", (0, 0, 1, 1), 0)] * 2)
    'a photo of two red circles'
    """
    if not (with_shape or with_colour):
        raise ValueError("describe needs with_shape or with_colour")
    keys = [(o.color if with_colour else None, o.shape if with_shape else "object") for o in objs]
    counts = Counter(keys)
    phrases = []
    for colour, noun in dict.fromkeys(keys):  # unique, in order
        n = counts[(colour, noun)]
        plural = W.PLURALS.get(noun, noun + "s") if n > 1 else noun
        words = ([colour] if colour else []) + [plural]
        head = ("an" if words[0][0] in "aeiou" else "a") if n == 1 else W.NUMBERS[n]
        phrases.append(" ".join([head, *words]))
    return "a photo of " + " and ".join(phrases)


def captions(spec: W.Spec, objs: list[W.PlacedObject]) -> dict[str, str]:
    """The caption variants of one render: the spec's own GenEval prompt, a full caption naming every object's
    colour and shape, a shape-only caption ("a photo of a circle and two squares") and a colour-only caption
    ("a photo of a red object and two blue objects")."""
    return {
        "prompt": spec.prompt(),
        "full": describe(objs),
        "shapes": describe(objs, with_colour=False),
        "colours": describe(objs, with_shape=False),
    }


def pool_seed(seed: int) -> int:
    """Seed of the training pool's specs and layouts."""
    return (seed * 1_000_003 + 17) & 0x7FFFFFFF


@dataclass
class Pool:
    """A fixed set of training renders: images (N, 3, 64, 64) uint8, the caption variants and spec of each."""

    images: Any  # torch.Tensor (N, 3, H, W) uint8
    captions: list[dict[str, str]]
    specs: list[W.Spec]

    def __len__(self) -> int:
        return len(self.specs)


def render_pool(seed: int, n: int, progress: bool = False, desc: str = "rendering") -> Pool:
    """`n` training renders (seeded): rendering once and sampling batches from the pool keeps the 1-thread
    training step dominated by the model rather than by the renderer."""
    import numpy as np
    import torch
    from tqdm.auto import tqdm

    specs = sample_training_specs(n, seed=pool_seed(seed))
    rng = random.Random(pool_seed(seed) + 1)
    arr = np.empty((n, W.IMAGE_SIZE, W.IMAGE_SIZE, 3), dtype=np.uint8)
    caps = []
    for i, spec in enumerate(tqdm(specs, desc=desc, disable=not progress, leave=False)):
        img, objs = W.render(spec, rng)
        arr[i] = np.asarray(img)
        caps.append(captions(spec, objs))
    images = torch.from_numpy(arr).permute(0, 3, 1, 2).contiguous()  # (N, 3, H, W)
    return Pool(images, caps, specs)


def batch_indices(seed: int, step: int, pool_size: int, batch_size: int) -> tuple[list[int], random.Random]:
    """Pool indices of training step `step` (a pure function of seed and step) and that step's RNG."""
    rng = random.Random(step_seed(seed, step))
    return rng.sample(range(pool_size), batch_size), rng


def training_batch(
    pool: Pool,
    seed: int,
    step: int,
    batch_size: int,
    kinds: tuple[str, ...] = CAPTION_KINDS,
    weights: tuple[float, ...] | None = None,
) -> tuple[Any, list[str], list[int]]:
    """Images (B, 3, H, W) uint8, one caption each (kind drawn from `kinds` with `weights`, uniform by default)
    and the pool indices of training step `step`."""
    idx, rng = batch_indices(seed, step, len(pool), batch_size)
    texts = [pool.captions[i][k] for i, k in zip(idx, rng.choices(kinds, weights=weights, k=len(idx)))]
    return pool.images[idx], texts, idx


def lr_at(step: int, total: int, peak: float, warmup: int, floor: float = 0.1) -> float:
    """Linear warm-up to `peak`, then cosine decay to `floor * peak` at `total` steps."""
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t)))


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Atomically write a training checkpoint (tensors, ints, floats, strings): temp file, then ``os.replace``."""
    import torch

    from imgalign.files import replacing

    path.parent.mkdir(parents=True, exist_ok=True)
    with writing(path), replacing(path) as tmp:
        torch.save(state, tmp)


def save_training_state(
    path: Path,
    model: Any,
    opt: Any,
    done: int,
    t0: float,
    cfg: Any,
    history: list[dict[str, Any]],
    loss_avg: float | None,
) -> None:
    """The resumable state shared by the CLIP and VLM pretraining loops (model, optimizer, step, clock, config, and
    the running loss average, so that a resumed or rerun run reports the loss an uninterrupted one does)."""
    state = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "step": done,
        "elapsed": time.time() - t0,
        "config": json.dumps(asdict(cfg), sort_keys=True),
        "history": json.dumps(history),
    }
    if loss_avg is not None:
        state["loss_avg"] = float(loss_avg)
    save_checkpoint(path, state)


def final_metrics(
    evaluate: Callable[[], dict[str, float]],
    loss_avg: float | None,
    t0: float,
    steps: int,
    history: list[dict[str, Any]],
    work: Path,
) -> tuple[dict[str, float], float]:
    """Evaluate once more at the end, append to the history (also written to ``work/history.json``), and return
    the metrics and the elapsed seconds."""
    elapsed = time.time() - t0
    metrics = evaluate()
    # a rerun of a finished run whose checkpoint predates its loss average: the last loss logged
    if loss_avg is None:
        logged = [h["train/loss"] for h in history if isinstance(h.get("train/loss"), (int, float))]
        loss_avg = next((v for v in reversed(logged) if math.isfinite(v)), None)
    metrics["train/loss"] = float(loss_avg) if loss_avg is not None else float("nan")
    metrics["train/minutes"] = elapsed / 60
    if history and history[-1].get("step") == steps:  # a rerun replaces the final row instead of adding one
        history.pop()
    history.append({"step": steps, **metrics})
    work.mkdir(parents=True, exist_ok=True)
    (work / "history.json").write_text(json.dumps(history, indent=1) + "\n")
    return metrics, elapsed


def load_checkpoint(path: Path) -> dict[str, Any] | None:
    """The checkpoint at `path`, or None when there is none (``weights_only=True``: tensors and plain data); a
    damaged one raises a ValueError naming it."""
    return load_state(path, required=("config",))  # read first: whether it is this run's (resume_state)


def resume_state(path: Path, cfg: Any, name: str) -> dict[str, Any] | None:
    """The checkpoint at `path` (None when there is none), refused when it was written with a config other than
    `cfg`: called before any model is built, so a rerun with a changed setting fails at once. The error names
    component `name`, the folder and every changed setting."""
    state = load_checkpoint(path)
    if state is not None and state["config"] != json.dumps(asdict(cfg), sort_keys=True):
        changes = config_changes(json.loads(state["config"]), json.loads(json.dumps(asdict(cfg))))
        raise ValueError(
            f"{name}: the checkpoint in {path.parent} was written with a different config ({changes}); use "
            "another --out or delete that folder to start over"
        )
    return state


def check_at_least(cfg: Any, low: int, *names: str) -> None:
    """Raise naming the first of the settings `names` of `cfg` that is below `low`."""
    for name in names:
        v = getattr(cfg, name)
        if v < low:
            raise ValueError(f"{name} must be at least {low} (got {v}); set it with --set {name}=N")


def check_rates(cfg: Any, *names: str) -> None:
    """Raise naming the first learning rate of `names` that is not > 0 and finite (inf or 0 ran the whole pretraining
    to NaN or unchanged weights)."""
    for name in names:
        v = getattr(cfg, name)
        if not 0 < v < math.inf:
            raise ValueError(
                f"{name} must be > 0 and finite (got {v}); set it with --set {name}=X, e.g. 1e-3"
            )


def check_caption_weights(cfg: Any, component: str) -> None:
    """Raise unless `cfg.caption_weights` has one finite, non-negative weight per caption kind
    (:data:`CAPTION_KINDS`), not all 0. A NaN or infinite weight passed the old check and stopped the run after
    the renders with random.choices' "Total of weights must be finite", naming no setting."""
    w = cfg.caption_weights
    if len(w) != len(CAPTION_KINDS) or not all(0 <= x < math.inf for x in w) or sum(w) <= 0:
        raise ValueError(
            f"{component}: caption_weights needs {len(CAPTION_KINDS)} finite non-negative numbers, not all 0 "
            f"({CAPTION_KINDS}); got {list(w)}"
        )


def check_weights(cfg: Any, *names: str, positive: bool = False) -> None:
    """Raise naming the first loss weight or decay of `names` that is negative (0 too when `positive`) or not
    finite: a negative one trained toward the opposite, an infinite one to NaN, after the renders."""
    for name in names:
        v = getattr(cfg, name)
        if not (v > 0 if positive else v >= 0) or not math.isfinite(v):
            bound = "> 0" if positive else ">= 0"
            raise ValueError(f"{name} must be {bound} and finite (got {v}); set it with --set {name}=X")


@contextlib.contextmanager
def exporting(out: Path) -> Iterator[Path]:
    """The folder ``OUT.tmp`` to write model folder `out` into, moved into place (:func:`replace_dir`) when the
    block ends. A ``.tmp`` a killed run left is removed first (saved into, its stray files shipped with the model);
    a write cut short (a full disk, a file-size limit, Ctrl-C) removes it (it was left until the next run) and is
    an OSError naming `out` (:func:`~imgalign.pretrain.writing`)."""
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with writing(out):
            yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_dir(tmp, out)


def replace_dir(tmp: Path, final: Path) -> None:
    """Move a fully written folder `tmp` into place at `final` (the old one is removed only after), its files
    readable as ``open()`` makes them (:func:`imgalign.files.open_mode`)."""
    from imgalign.files import open_mode

    open_mode(tmp)
    old = final.with_name(final.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    if old.exists():
        shutil.rmtree(old)


def history_table(history: list[dict[str, Any]]) -> list[str]:
    """Markdown lines of the periodic evaluations (step, then every metric), for the model card."""
    if not history:
        return []
    keys = [k for k in history[-1] if k not in ("step", "train/minutes")]
    lines = ["During training:", "", "| step | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for h in history:
        cells = [f"{h[k]:.3f}" if isinstance(h.get(k), float) else str(h.get(k, "")) for k in keys]
        lines.append(f"| {h['step']} | " + " | ".join(cells) + " |")
    return [*lines, ""]

"""Seeded generation with models named on the command line (``imgalign grid``, real-model evaluation), and the
sampler settings each model family needs. Models load with :func:`imgalign.pipelines.load_pipeline`, whose docstring
gives the model syntax (``shapes``, ``PATH``, ``BASE+OVERLAY``, a trainer checkpoint).

Generation is seeded per image (a CPU ``torch.Generator`` per image), so the same seed gives every model the same
starting noise, on any device, when their latent shapes agree.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from imgalign.pipelines import ModelSpec

log = logging.getLogger(__name__)


def generate_images(
    pipe: Any,
    prompts: Sequence[str],
    seeds: Sequence[int],
    steps: int | None = None,
    guidance: float | None = None,
    size: int | None = None,
    max_sequence_length: int | None = None,
    batch_size: int = 8,
) -> list[Image.Image]:
    """One image per (prompt, seed) pair, in order; unset settings default to the pipeline's own.

    Each image's noise comes from its own CPU ``torch.Generator`` seeded with its seed, so results do not depend
    on batching or on the device (and match :func:`imgalign.sampling.generate` for the same settings)."""
    if len(prompts) != len(seeds):
        raise ValueError(f"got {len(prompts)} prompts but {len(seeds)} seeds")
    kwargs: dict[str, Any] = {"output_type": "pil"}
    if steps is not None:
        kwargs["num_inference_steps"] = steps
    if guidance is not None:
        kwargs["guidance_scale"] = guidance
    if size is not None:
        kwargs["height"] = kwargs["width"] = size
    if max_sequence_length is not None:
        kwargs["max_sequence_length"] = max_sequence_length
    images: list[Image.Image] = []
    with torch.no_grad():
        for i in range(0, len(prompts), batch_size):
            ps, ss = list(prompts[i : i + batch_size]), list(seeds[i : i + batch_size])
            gens = [torch.Generator("cpu").manual_seed(int(s)) for s in ss]
            images += list(pipe(prompt=ps, generator=gens, **kwargs).images)
    return images


SHAPES_NAMES = ("shapes", "shapes-t2i")


def is_shapes_family(spec: ModelSpec) -> bool:
    """Whether a model is the embedded shapes model or a checkpoint of its architecture (same transformer config),
    which must be sampled with the settings it was trained for."""
    from imgalign.hub import ASSETS, EMBEDDED

    if spec.base in SHAPES_NAMES:
        return True
    if spec.base in EMBEDDED:
        return False
    ref = ASSETS / EMBEDDED["shapes"] / "transformer" / "config.json"
    cfg = Path(spec.base) / "transformer" / "config.json"
    if not (ref.is_file() and cfg.is_file()):
        return False

    def arch(path: Path) -> dict[str, Any]:
        return {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith("_")}

    return arch(ref) == arch(cfg)


def sampling_defaults(spec: ModelSpec) -> dict[str, Any]:
    """Sampler settings for `spec`: the shapes family uses :mod:`imgalign.sampling`'s evaluation settings (its
    step count, guidance and the zero-context length it was trained with); other pipelines their own defaults."""
    if not is_shapes_family(spec):
        return {}
    try:
        import imgalign.sampling as S
    except ImportError:
        return {}
    names = {
        "steps": "NUM_INFERENCE_STEPS",
        "guidance": "GUIDANCE_SCALE",
        "max_sequence_length": "MAX_SEQUENCE_LENGTH",
    }
    return {k: getattr(S, v) for k, v in names.items() if hasattr(S, v)}


def generate_folder(
    pipe: Any,
    metas: Sequence[dict[str, Any]],
    out_dir: Path,
    images_per_prompt: int = 4,
    seed: int = 0,
    batch_size: int = 8,
    progress: bool = True,
    **sample_kwargs: Any,
) -> None:
    """Generate `images_per_prompt` images for every metadata line into the official GenEval layout.

    Image j of prompt i uses seed ``image_seed(seed, i, j)``, as the shapes suite does, so it is the same image
    whatever `images_per_prompt` is; prompts whose samples all exist are skipped, so an interrupted run resumes."""
    from tqdm.auto import tqdm

    from imgalign.eval.suite import write_prompt_folder
    from imgalign.sampling import image_seed

    if images_per_prompt < 1:
        raise ValueError("images per prompt must be at least 1")
    out_dir = Path(out_dir)
    for i, meta in enumerate(tqdm(metas, desc="generating", disable=not progress, unit="prompt")):
        samples = out_dir / f"{i:05d}" / "samples"
        have = [j for j in range(images_per_prompt) if (samples / f"{j:04d}.png").is_file()]
        todo = [j for j in range(images_per_prompt) if j not in have]
        if not todo:
            continue
        seeds = [image_seed(seed, i, j) for j in todo]
        images = generate_images(
            pipe, [meta["prompt"]] * len(todo), seeds, batch_size=batch_size, **sample_kwargs
        )
        for j, img in zip(todo, images):
            write_prompt_folder(out_dir, i, meta, [img], start=j)

"""Sampling from text-to-image pipelines: batched seeded generation and GenEval folders; a model given by name or
path loads with :func:`imgalign.pipelines.load_pipeline`.

The embedded model ``shapes`` is a stock :class:`diffusers.StableDiffusion3Pipeline` (see
``imgalign/assets/models/shapes-t2i/README.md``). It has no T5 encoder; the pipeline then appends
``max_sequence_length`` all-zero tokens to the CLIP context. The shapes model was trained with
:data:`MAX_SEQUENCE_LENGTH` such tokens, so pass that value (``generate`` does) -- the pipeline's own default (256)
is a context the model never saw.

Default evaluation sampler settings (used by ``imgalign eval --model``): :data:`NUM_INFERENCE_STEPS` Euler steps of
the pipeline's flow-matching scheduler with classifier-free guidance scale :data:`GUIDANCE_SCALE`, 64x64 images.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from tqdm.auto import tqdm

from imgalign.pipelines import load_pipeline

log = logging.getLogger(__name__)

NUM_INFERENCE_STEPS = 20
"""Euler steps of the default evaluation sampler."""
GUIDANCE_SCALE = 4.0
"""Classifier-free guidance scale of the default evaluation sampler."""
MAX_SEQUENCE_LENGTH = 1
"""Zero 'T5' context tokens appended by the pipeline (no T5 encoder); the shapes model was trained with this many."""
BATCH_SIZE = 32
"""Prompts sampled together by :func:`generate_folder`."""


def supported_sizes(pipe) -> list[int]:
    """Image sides (pixels) the pipeline's transformer can take: multiples of VAE factor x patch, up to the
    positional-embedding grid."""
    step = pipe.vae_scale_factor * pipe.patch_size
    max_grid = pipe.transformer.config.pos_embed_max_size or pipe.transformer.config.sample_size
    return [step * k for k in range(1, max_grid + 1)]


def check_size(pipe, height: int, width: int) -> None:
    sizes = supported_sizes(pipe)
    for what, v in (("height", height), ("width", width)):
        if v not in sizes:
            raise ValueError(
                f"{what}={v} is not an image size this model can take; use one of {sizes} "
                f"(trained at {pipe.default_sample_size * pipe.vae_scale_factor})"
            )


def warn_unknown_words(pipe, prompts: Sequence[str]) -> None:
    """Warn (once per call) about prompt words outside the tokenizer's whole-word vocabulary."""
    tok = pipe.tokenizer
    vocab = tok.get_vocab()
    unknown = sorted(
        {
            w
            for p in prompts
            for w in (x.strip(".,!?;:'\"()") for x in p.lower().split())
            if w and w + "</w>" not in vocab
        }
    )
    if unknown:
        log.warning(
            "words outside the model's vocabulary (tokenised as pieces the model never learned): %s",
            ", ".join(unknown),
        )


@torch.no_grad()
def generate(
    pipe,
    prompts: Sequence[str],
    seeds: Sequence[int],
    num_inference_steps: int = NUM_INFERENCE_STEPS,
    guidance_scale: float = GUIDANCE_SCALE,
    height: int = 64,
    width: int = 64,
    batch_size: int = BATCH_SIZE,
    max_sequence_length: int = MAX_SEQUENCE_LENGTH,
    **kwargs: Any,
) -> list[Image.Image]:
    """One image per (prompt, seed), sampled `batch_size` at a time; image i's initial noise comes from its own
    ``torch.Generator`` seeded with ``seeds[i]``, so a result does not depend on how the prompts are batched."""
    if len(prompts) != len(seeds):
        raise ValueError(f"got {len(prompts)} prompts but {len(seeds)} seeds; give one seed per prompt")
    check_size(pipe, height, width)
    warn_unknown_words(pipe, prompts)
    device = pipe._execution_device
    images: list[Image.Image] = []
    for i in range(0, len(prompts), batch_size):
        ps, ss = list(prompts[i : i + batch_size]), seeds[i : i + batch_size]
        gens = [torch.Generator(device="cpu").manual_seed(int(s)) for s in ss]
        # noise drawn on the CPU per image, so it is the same on every device
        latents = torch.stack(
            [
                torch.randn(
                    (
                        pipe.transformer.config.in_channels,
                        height // pipe.vae_scale_factor,
                        width // pipe.vae_scale_factor,
                    ),
                    generator=g,
                )
                for g in gens
            ]
        ).to(device=device, dtype=pipe.transformer.dtype)
        out = pipe(
            prompt=ps,
            height=height,
            width=width,
            num_inference_steps=num_inference_steps,
            guidance_scale=guidance_scale,
            latents=latents,
            max_sequence_length=max_sequence_length,
            output_type="pil",
            **kwargs,
        )
        images.extend(out.images)
    return images


def image_seed(seed: int, index: int, j: int) -> int:
    """The seed of image `j` of prompt `index`, shared by every generator and renderer that writes the GenEval layout
    (shapes renders, shapes-model and real-model sampling), so image j of prompt i does not depend on how many images
    per prompt a run asks for."""
    return (seed * 1_000_003 + index * 1009 + j) & 0x7FFFFFFF


def generate_folder(
    model,
    metas: Sequence[dict[str, Any]],
    out_dir: Path,
    images_per_prompt: int,
    seed: int,
    progress: bool = True,
    num_inference_steps: int = NUM_INFERENCE_STEPS,
    guidance_scale: float = GUIDANCE_SCALE,
    batch_size: int = BATCH_SIZE,
) -> None:
    """Sample `images_per_prompt` images for every metadata line into the GenEval layout at `out_dir`
    (image j of prompt i uses seed ``image_seed(seed, i, j)``); `model` is a name, a folder or a loaded pipeline.
    Prompts whose folder already holds all its images are skipped, so an interrupted run resumes."""
    from imgalign.eval.suite import write_prompt_folder

    pipe = load_pipeline(model) if isinstance(model, (str, Path)) else model
    out_dir = Path(out_dir)
    jobs = []
    for i in range(len(metas)):
        d = out_dir / f"{i:05d}" / "samples"
        if all((d / f"{j:04d}.png").is_file() for j in range(images_per_prompt)):
            continue
        jobs += [(i, j) for j in range(images_per_prompt)]
    per_batch = max(1, batch_size)
    with tqdm(total=len(jobs), desc="sampling", unit="img", disable=not progress) as bar:
        for k in range(0, len(jobs), per_batch):
            chunk = jobs[k : k + per_batch]
            imgs = generate(
                pipe,
                [metas[i]["prompt"] for i, _ in chunk],
                [image_seed(seed, i, j) for i, j in chunk],
                num_inference_steps=num_inference_steps,
                guidance_scale=guidance_scale,
                batch_size=per_batch,
            )
            for (i, j), img in zip(chunk, imgs):
                write_prompt_folder(out_dir, i, metas[i], [img], start=j)
            bar.update(len(chunk))

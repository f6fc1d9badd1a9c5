"""Sampling from text-to-image pipelines: batched seeded generation and GenEval folders; a model given by name or
path loads with :func:`imgalign.pipelines.load_pipeline`.

The embedded model ``shapes`` is a stock :class:`diffusers.StableDiffusion3Pipeline` (see
``imgalign/assets/models/shapes-t2i/README.md``). It has no T5 encoder; the pipeline then appends
``max_sequence_length`` all-zero tokens to the CLIP context. The shapes model was trained with
:data:`MAX_SEQUENCE_LENGTH` such tokens, so pass that value (``generate`` does) -- the pipeline's own default (256)
is a context the model never saw.

Default evaluation sampler settings (used by ``imgalign eval --model``): :data:`NUM_INFERENCE_STEPS` Euler steps of
the pipeline's flow-matching scheduler with classifier-free guidance scale :data:`GUIDANCE_SCALE`, :data:`IMAGE_SIZE`
square images and :data:`MAX_SEQUENCE_LENGTH` zero context tokens.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from tqdm.auto import tqdm

from imgalign.pipelines import (
    TRUNCATION_NOTICE,
    MessageFilter,
    ignores_guidance,
    length_warning_said,
    load_pipeline,
    once_per_call,
    restore_length_warning,
)
from imgalign.pretrain.tokenizer import is_word, prompt_pieces

log = logging.getLogger(__name__)

NUM_INFERENCE_STEPS = 20
"""Euler steps of the default evaluation sampler."""
GUIDANCE_SCALE = 4.0
"""Classifier-free guidance scale of the default evaluation sampler."""
IMAGE_SIZE = 64
"""Image height and width (pixels) of the default evaluation sampler: the shapes model's training size."""
MAX_SEQUENCE_LENGTH = 1
"""Zero 'T5' context tokens appended by the pipeline (no T5 encoder); the shapes model was trained with this many."""
BATCH_SIZE = 32
"""Prompts sampled together by :func:`generate_folder`."""


def supported_sizes(pipe) -> list[int]:
    """Image sides (pixels) the pipeline's transformer can take: multiples of VAE factor x patch, up to the
    positional-embedding grid."""
    if hasattr(pipe, "patch_size"):  # SD3: patches up to the positional-embedding grid
        step = pipe.vae_scale_factor * pipe.patch_size
        max_grid = pipe.transformer.config.pos_embed_max_size or pipe.transformer.config.sample_size
    else:  # FLUX: 2x2 packed latent patches and RoPE (no bounded grid): listed up to 4x its default size
        step = pipe.vae_scale_factor * 2
        max_grid = 4 * pipe.default_sample_size * pipe.vae_scale_factor // step
    return [step * k for k in range(1, max_grid + 1)]


def folder_sizes(
    folder: str | Path, transformer_folder: str | Path | None = None
) -> tuple[list[int], int] | None:
    """(:func:`supported_sizes`, trained size) of the pipeline saved in `folder`, read from its JSON configs
    without loading it, as diffusers' SD3 and FLUX pipelines derive them; `transformer_folder` holds a transformer
    that replaces the folder's own (an overlay). None when the configs cannot tell (no such files, another
    pipeline class): the size is then checked once the pipeline has loaded."""
    folder = Path(folder)
    t_dir = Path(transformer_folder) if transformer_folder is not None else folder / "transformer"
    try:
        pipeline_class = json.loads((folder / "model_index.json").read_text()).get("_class_name", "")
        transformer = json.loads((t_dir / "config.json").read_text())
        vae = json.loads((folder / "vae" / "config.json").read_text())
        vae_scale_factor = 2 ** (len(vae["block_out_channels"]) - 1)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if pipeline_class.startswith("StableDiffusion3"):
        # an absent key loads as SD3Transformer2DModel's default; a null pos_embed_max_size means no bound
        step = vae_scale_factor * _sd3_setting(transformer, "patch_size")
        default = _sd3_setting(transformer, "sample_size")
        max_grid = _sd3_setting(transformer, "pos_embed_max_size") or default
    elif pipeline_class.startswith("Flux"):
        step, default = vae_scale_factor * 2, 128  # FluxPipeline.default_sample_size is fixed
        max_grid = 4 * default * vae_scale_factor // step
    else:
        return None
    return [step * k for k in range(1, max_grid + 1)], default * vae_scale_factor


def _sd3_setting(config: dict[str, Any], key: str) -> Any:
    """`key` of an SD3 transformer's config.json, or SD3Transformer2DModel's own default when it is absent (the
    value ``from_pretrained`` would build it with)."""
    if key in config:
        return config[key]
    import inspect

    from diffusers import SD3Transformer2DModel

    return inspect.signature(SD3Transformer2DModel.__init__).parameters[key].default


def size_error(what: str, v: int, sizes: list[int], trained: int) -> str | None:
    """The message for an image side `v` outside `sizes`, or None when it is one of them."""
    if v in sizes:
        return None
    return (
        f"{what}={v} is not an image size this model can take; use a multiple of {sizes[0]} from "
        f"{sizes[0]} to {sizes[-1]} (trained at {trained})"
    )


def check_size(pipe, height: int, width: int) -> None:
    sizes = supported_sizes(pipe)
    for what, v in (("height", height), ("width", width)):
        message = size_error(what, v, sizes, pipe.default_sample_size * pipe.vae_scale_factor)
        if message:
            raise ValueError(message)


def unknown_token_words(tok: Any, words: Sequence[str]) -> list[str]:
    """The `words` that tokenizer `tok` maps, in part, to its unknown token (characters outside its vocabulary, such
    as ``&`` or ``é`` for the shapes model's); none for a tokenizer without one or that is not callable."""
    unk = getattr(tok, "unk_token_id", None)
    if unk is None or not callable(tok):
        return []
    return [w for w in words if unk in tok(w, add_special_tokens=False)["input_ids"]]


def warn_unknown_words(pipe, prompts: Sequence[str]) -> None:
    """Warn (once per call) about prompt words outside the tokenizer's whole-word vocabulary, and apart about the
    words with characters it cannot tokenise: the shapes tokenizer reads those as its unknown token, which is its
    end-of-text token, and the CLIP text encoders' pooled embedding stops at the first one."""
    tok = pipe.tokenizer
    vocab = tok.get_vocab()
    # split as the tokenizer splits before BPE: "red-circle" is three whole words, not one unknown one
    unknown = sorted({w for p in prompts for w in prompt_pieces(p) if w + "</w>" not in vocab})
    lost = unknown_token_words(tok, unknown)
    # bare punctuation (".", "...") is no word: named only where the tokenizer cannot read its characters
    pieces = [w for w in unknown if w not in lost and is_word(w)]
    if pieces:
        log.warning(
            "words outside the model's vocabulary (tokenised as pieces the model never learned): %s",
            ", ".join(pieces),
        )
    if lost:
        ends = getattr(tok, "unk_token_id", None) == getattr(tok, "eos_token_id", None)
        why = " (its end-of-text token: the text encoders' pooled embedding ignores every word after it)"
        log.warning(
            "words with characters outside the model's tokenizer, read as its unknown token %s%s: %s; leave those "
            "characters out (e.g. write 'and' for '&')",
            tok.unk_token,
            why if ends else "",
            ", ".join(lost),
        )


@torch.no_grad()
def generate_images(
    pipe: Any,
    prompts: Sequence[str],
    seeds: Sequence[int],
    batch_size: int = 8,
    steps: int | None = None,
    guidance: float | None = None,
    size: int | None = None,
    max_sequence_length: int | None = None,
    **call_kwargs: Any,
) -> list[Image.Image]:
    """One image per (prompt, seed), sampled `batch_size` at a time, with any diffusers pipeline; unset settings
    (None) are the pipeline's own, `call_kwargs` go to the pipeline call as they are.

    Image i's initial noise comes from its own CPU ``torch.Generator`` seeded with ``seeds[i]`` (diffusers draws
    each image's noise on its generator), so a result does not depend on how prompts are batched or on the device,
    and the same seed gives every model the same starting noise when their latent shapes agree."""
    if len(prompts) != len(seeds):
        raise ValueError(f"got {len(prompts)} prompts but {len(seeds)} seeds; give one seed per prompt")
    kwargs: dict[str, Any] = {"output_type": "pil", **call_kwargs}
    given = {
        "num_inference_steps": steps,
        "guidance_scale": guidance,
        "max_sequence_length": max_sequence_length,
    }
    kwargs.update({k: v for k, v in given.items() if v is not None})
    if size is not None:
        if getattr(pipe, "transformer", None) is not None:
            check_size(pipe, size, size)  # the sizes the transformer can take
        kwargs["height"] = kwargs["width"] = size
    images: list[Image.Image] = []
    per_call = max(1, batch_size)
    for i in range(0, len(prompts), per_call):
        ps, ss = list(prompts[i : i + per_call]), seeds[i : i + per_call]
        gens = [torch.Generator(device="cpu").manual_seed(int(s)) for s in ss]
        images.extend(pipe(prompt=ps, generator=gens, **kwargs).images)
    return images


def generate(
    pipe,
    prompts: Sequence[str],
    seeds: Sequence[int],
    num_inference_steps: int = NUM_INFERENCE_STEPS,
    guidance_scale: float = GUIDANCE_SCALE,
    height: int = IMAGE_SIZE,
    width: int = IMAGE_SIZE,
    batch_size: int = BATCH_SIZE,
    max_sequence_length: int = MAX_SEQUENCE_LENGTH,
    **kwargs: Any,
) -> list[Image.Image]:
    """:func:`generate_images` with the shapes model's evaluation settings as defaults, after checking the image
    size and warning about prompt words outside the model's vocabulary."""
    check_size(pipe, height, width)
    warn_unknown_words(pipe, prompts)
    return generate_images(
        pipe,
        prompts,
        seeds,
        batch_size,
        steps=num_inference_steps,
        guidance=guidance_scale,
        max_sequence_length=max_sequence_length,
        height=height,
        width=width,
        **kwargs,
    )


def image_seed(seed: int, index: int, j: int) -> int:
    """The seed of image `j` of prompt `index`, shared by every generator and renderer that writes the GenEval layout
    (shapes renders, shapes-model and real-model sampling), so image j of prompt i does not depend on how many images
    per prompt a run asks for."""
    return (seed * 1_000_003 + index * 1009 + j) & 0x7FFFFFFF


def warn_unread_guidance(pipe: Any, label: str, guidance: float | None) -> None:
    """Warn that `guidance`, a guidance scale given for `pipe`, changes nothing when its transformer has no
    guidance embedding (a FLUX.1-schnell-like model: FluxPipeline ignores the scale silently)."""
    if guidance is not None and ignores_guidance(getattr(pipe, "transformer", None)):
        log.warning(
            "%s has no guidance embedding (a FLUX.1-schnell-like transformer): guidance scale %s changes nothing "
            "for it",
            label,
            guidance,
        )


def truncation_said_once(pipe: Any) -> Any:
    """A context in which `pipe`'s pipeline module logs diffusers' "The following part of your input was truncated
    ..." once: it was repeated for every batch of a folder (45 times for the shapes suite on a FLUX model) or every
    prompt of a grid."""
    return once_per_call(type(pipe).__module__, TRUNCATION_NOTICE)


def long_rows_warning(
    label: str,
    prompts: Sequence[str],
    over: dict[str, tuple[str, int]],
    kept: str,
    noun: str = "row",
    names: Sequence[str] | None = None,
) -> str:
    """The line saying which of `prompts` model `label`'s text encoders truncate (`over`, from
    :func:`~imgalign.trainers.prompting.over_limit`; not empty), naming the first one's token count. Each prompt
    is called `noun` and its name in `names` (by default its 1-based number: a grid row)."""
    names = names or [str(n) for n in range(1, len(prompts) + 1)]
    rows = [name for name, p in zip(names, prompts) if p in over]
    encoder, tokens = over[next(p for p in prompts if p in over)]
    shown = ", ".join(rows[:10]) + (f" and {len(rows) - 10} more" if len(rows) > 10 else "")
    which = (
        f"the prompts of {noun}s {shown} ({noun} {rows[0]}: {tokens} {encoder} tokens) are"
        if len(rows) > 1
        else f"the prompt of {noun} {rows[0]} ({tokens} {encoder} tokens) is"
    )
    return (
        f"{label}: {which} longer than its text encoders take ({kept} tokens): truncated when encoded, so the "
        "words past the limit do not steer its images"
    )


@contextlib.contextmanager
def long_prompts_said(
    pipe: Any,
    label: str,
    prompts: Sequence[str],
    max_sequence_length: int | None,
    noun: str = "row",
    names: Sequence[str] | None = None,
) -> Iterator[None]:
    """A block sampling `prompts` with `pipe`, in which the ones its text encoders truncate are named once, up front
    (:func:`long_rows_warning`, with `noun` and `names`), and the libraries' own notices are quiet: transformers'
    "indexing errors" line and diffusers' "The following part of your input was truncated", let through once, named
    no prompt and showed the first truncated prompt's cut part (only its end token for a 13-token prompt, while a
    1212-token one lost nearly every word)."""
    import inspect

    from imgalign.trainers.prompting import over_limit, token_limits

    if max_sequence_length is None:  # the pipeline call's own default (SD3 256, FLUX 512)
        try:
            param = inspect.signature(pipe).parameters.get("max_sequence_length")
        except (TypeError, ValueError):  # not callable, or no signature to read
            param = None
        max_sequence_length = param.default if param is not None and isinstance(param.default, int) else 256
    limits = token_limits(pipe, int(max_sequence_length))
    over = over_limit(list(prompts), limits)
    if not over:
        with truncation_said_once(pipe):
            yield
        return
    kept = ", ".join(dict.fromkeys(f"{e} {n}" for e, _, n in limits))
    log.warning("%s", long_rows_warning(label, prompts, over, kept, noun, names))
    # for this block only: a caller's pipeline that samples other long prompts after it gets the line again
    marks = length_warning_said(pipe)
    logger, quiet = logging.getLogger(type(pipe).__module__), MessageFilter(TRUNCATION_NOTICE)
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)
        restore_length_warning(marks)


def generate_folder(
    model: Any,
    metas: Sequence[dict[str, Any]],
    out_dir: Path,
    images_per_prompt: int,
    seed: int,
    progress: bool = True,
    batch_size: int = BATCH_SIZE,
    sample: Callable[..., list[Image.Image]] | None = None,
    device: str = "cpu",
    **settings: Any,
) -> None:
    """Sample `images_per_prompt` images for every metadata line into the GenEval layout at `out_dir`, `batch_size`
    images per pipeline call across prompts; image j of prompt i uses seed ``image_seed(seed, i, j)``, so it is the
    same sample whatever `images_per_prompt` is (up to float rounding: the batch it shares a forward with changes,
    which moved a pixel by one 8-bit level in 3 of 12 images, verdicts unchanged). `model` is a name or a folder
    (loaded on `device`) or a loaded pipeline; `sample` is :func:`generate` (the shapes model's settings; the
    default) or :func:`generate_images` (the pipeline's own), and `settings` go to it. Prompts whose folder already
    holds all its images are skipped, so an interrupted run resumes."""
    from imgalign.eval.suite import load_image, write_prompt_folder

    if images_per_prompt < 1:
        raise ValueError("images per prompt must be at least 1")
    sample = sample or generate
    pipe = load_pipeline(model, device=device) if isinstance(model, (str, Path)) else model
    label = str(model) if isinstance(model, (str, Path)) else "the model"
    warn_unread_guidance(pipe, label, settings.get("guidance_scale", settings.get("guidance")))
    out_dir = Path(out_dir)

    def have(path: Path) -> bool:
        # an image damaged since it was written (a truncated or overwritten file) is sampled again: kept, it was
        # judged as an incorrect 'cannot read image' on every resume
        if not path.is_file():
            return False
        try:
            load_image(path)
        # PIL's UnidentifiedImageError is an OSError; an image over its pixel limit (a file replaced since) is not
        except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
            log.warning("%s cannot be read as an image; sampling it again", path)
            return False
        return True

    jobs = []
    for i in range(len(metas)):
        d = out_dir / f"{i:05d}" / "samples"
        jobs += [(i, j) for j in range(images_per_prompt) if not have(d / f"{j:04d}.png")]
    per_batch = max(1, batch_size)
    # the prompt folders still to sample: a resumed evaluation named the truncated prompts of finished folders again
    todo = sorted({i for i, _ in jobs})
    with (
        long_prompts_said(
            pipe,
            label,
            [metas[i]["prompt"] for i in todo],
            settings.get("max_sequence_length"),
            "prompt folder",
            [f"{i:05d}" for i in todo],
        ),
        tqdm(total=len(jobs), desc="sampling", unit="img", disable=not progress) as bar,
    ):
        for k in range(0, len(jobs), per_batch):
            chunk = jobs[k : k + per_batch]
            imgs = sample(
                pipe,
                [metas[i]["prompt"] for i, _ in chunk],
                [image_seed(seed, i, j) for i, j in chunk],
                batch_size=per_batch,
                **settings,
            )
            for (i, j), img in zip(chunk, imgs):
                write_prompt_folder(out_dir, i, metas[i], [img], start=j)
            bar.update(len(chunk))

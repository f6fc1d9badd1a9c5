"""Text-to-image models named on the command line, loaded as diffusers pipelines, and seeded generation.

Model syntax (``imgalign grid --model``, real-model evaluation):

* ``shapes`` -- an embedded model name (:mod:`imgalign.hub`);
* ``PATH`` -- a full pipeline folder (``model_index.json``; what ``save_pretrained`` writes) or a Hub id already
  in the local cache;
* ``BASE+OVERLAY`` -- a base pipeline with a fine-tuned part on top. `OVERLAY` is a folder holding one of: a PEFT
  LoRA adapter of the transformer (``adapter_config.json``), a diffusers LoRA (``pytorch_lora_weights.safetensors``),
  a full transformer (``config.json`` + weights) or a ``transformer/`` subfolder. Example:
  ``--model ft=shapes+path/to/peft_adapter``.
* ``CHECKPOINT`` -- a LoRA checkpoint of imgalign's trainer alone: its ``imgalign_model.json`` names the base
  (``--model ft=runs/grpo/checkpoints/step-000500``).

Generation is seeded per image (a CPU ``torch.Generator`` per image), so the same seed gives every model the same
starting noise, on any device, when their latent shapes agree.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from PIL import Image

log = logging.getLogger(__name__)

LORA_FILES = ("pytorch_lora_weights.safetensors", "pytorch_lora_weights.bin")


@dataclass(frozen=True)
class ModelSpec:
    label: str
    base: str
    overlay: str | None = None

    def __str__(self) -> str:
        return self.base + (f"+{self.overlay}" if self.overlay else "")


def parse_model_arg(arg: str) -> ModelSpec:
    """``LABEL=PATH`` or ``LABEL=BASE+OVERLAY`` -> ModelSpec; a bare PATH is labelled by its last path part."""
    label, sep, rest = arg.partition("=")
    if not sep:
        label, rest = "", arg
    label, rest = label.strip(), rest.strip()
    if not rest:
        raise ValueError(f"--model {arg!r}: expected LABEL=PATH or LABEL=BASE+OVERLAY")
    base, plus, overlay = rest.partition("+")
    if plus and (not base or not overlay):
        raise ValueError(f"--model {arg!r}: BASE+OVERLAY needs both parts")
    if not label:
        label = Path(overlay or base).name or base
    return ModelSpec(label, base, overlay or None)


def overlay_kind(path: Path) -> str:
    """What a fine-tuned folder holds: 'peft', 'lora', 'transformer' or 'transformer-subfolder'."""
    if (path / "adapter_config.json").is_file():
        return "peft"
    if any((path / f).is_file() for f in LORA_FILES):
        return "lora"
    if (path / "transformer" / "config.json").is_file():
        return "transformer-subfolder"
    if (path / "config.json").is_file():
        return "transformer"
    raise ValueError(
        f"{str(path)!r} is not a fine-tuned model folder: expected adapter_config.json (PEFT LoRA), "
        f"{LORA_FILES[0]} (diffusers LoRA), config.json (a transformer) or a transformer/ subfolder"
    )


def check_model_spec(spec: ModelSpec) -> ModelSpec:
    """Fail before anything loads when a path does not exist or is not a model folder; returns the spec with a
    LoRA checkpoint's base filled in from its ``imgalign_model.json`` (what imgalign's trainer writes)."""
    from imgalign.hub import EMBEDDED, embedded_path

    if spec.base in EMBEDDED:
        embedded_path(spec.base)  # raises when its files are missing
    else:
        p = Path(spec.base)
        looks_like_path = (
            p.is_absolute() or spec.base.startswith(".") or p.exists() or spec.base.count("/") != 1
        )
        if p.is_dir():
            if (p / "adapter_config.json").is_file() or any((p / f).is_file() for f in LORA_FILES):
                if spec.overlay is None:
                    base = recorded_base(p)
                    if base:
                        return check_model_spec(ModelSpec(spec.label, base, spec.base))
                raise ValueError(
                    f"model {spec.label!r}: {spec.base!r} is a LoRA folder that does not name its base model; "
                    f"give it as {spec.label}=BASE+{spec.base}"
                )
            if not (p / "model_index.json").is_file():
                raise FileNotFoundError(
                    f"model {spec.label!r}: {spec.base!r} has no model_index.json; expected a diffusers pipeline "
                    "folder (save_pretrained), an embedded name (shapes) or BASE+OVERLAY"
                )
        elif looks_like_path or not hub_id_available(spec.base):
            raise FileNotFoundError(
                f"model {spec.label!r}: {spec.base!r} does not exist; give an embedded name (shapes), a pipeline "
                "folder or a Hub id already downloaded"
            )
    if spec.overlay is not None:
        op = Path(spec.overlay)
        if not op.is_dir():
            raise FileNotFoundError(
                f"model {spec.label!r}: fine-tuned folder {spec.overlay!r} does not exist"
            )
        overlay_kind(op)
    return spec


def recorded_base(folder: Path) -> str | None:
    """The base model a checkpoint names in ``imgalign_model.json`` (``base_model``), if any."""
    info = Path(folder) / "imgalign_model.json"
    if not info.is_file():
        return None
    try:
        base = json.loads(info.read_text()).get("base_model")
    except (json.JSONDecodeError, AttributeError):
        raise ValueError(f"{info}: not a JSON object; expected {{'base_model': ...}}") from None
    return str(base) if base else None


def hub_id_available(repo_id: str) -> bool:
    """Whether a Hub pipeline id can load: in the local cache, or the Hub may be contacted (not offline)."""
    from huggingface_hub import constants, try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(repo_id, "model_index.json")
    except ValueError:  # not a valid repo id
        return False
    offline = constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").upper() in (
        "1",
        "ON",
        "YES",
        "TRUE",
    )
    return isinstance(cached, str) or not offline


def load_pipeline(
    spec: ModelSpec | str, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> Any:
    """Load a diffusers pipeline for `spec` (embedded name, folder or Hub id, with an optional overlay)."""
    from diffusers import DiffusionPipeline

    from imgalign.hub import resolve

    if isinstance(spec, str):
        spec = parse_model_arg(spec)
    spec = check_model_spec(spec)
    base = resolve(spec.base)
    pipe = DiffusionPipeline.from_pretrained(base, dtype=dtype, **absent_components(base))
    if spec.overlay is not None:
        apply_overlay(pipe, Path(spec.overlay), dtype)
    pipe.to(device)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def absent_components(folder: str) -> dict[str, None]:
    """Components a saved pipeline left out (``[null, null]`` in model_index.json, e.g. SD3 without T5), which
    ``from_pretrained`` wants passed explicitly as None."""
    index = Path(folder) / "model_index.json"
    if not index.is_file():
        return {}
    entries = json.loads(index.read_text())
    return {k: None for k, v in entries.items() if isinstance(v, list) and all(x is None for x in v)}


def denoiser_name(pipe: Any) -> str:
    return "transformer" if getattr(pipe, "transformer", None) is not None else "unet"


def apply_overlay(pipe: Any, path: Path, dtype: torch.dtype = torch.float32) -> None:
    """Put a fine-tuned part on a loaded base pipeline (see the module docstring for the folder kinds)."""
    kind = overlay_kind(path)
    name = denoiser_name(pipe)
    denoiser = getattr(pipe, name)
    if kind == "peft":
        from peft import PeftModel

        merged = PeftModel.from_pretrained(denoiser, str(path)).merge_and_unload()
        setattr(pipe, name, merged)
    elif kind == "lora":
        pipe.load_lora_weights(str(path))
        pipe.fuse_lora()
    else:
        folder = path / "transformer" if kind == "transformer-subfolder" else path
        cls = type(denoiser)
        cfg = json.loads((folder / "config.json").read_text())
        if cfg.get("_class_name") not in (None, cls.__name__):
            raise ValueError(
                f"{folder} holds a {cfg['_class_name']}, but the base pipeline's {name} is a {cls.__name__}"
            )
        setattr(pipe, name, cls.from_pretrained(str(folder), dtype=dtype))


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

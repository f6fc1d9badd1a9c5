"""Loaders for the embedded shapes-world encoders, through the libraries' own loaders.

* ``shapes-clip``: an open_clip CLIP; its config is registered with open_clip under :data:`SHAPES_CLIP_NAME`, so
  after :func:`register_shapes_clip` the plain call
  ``open_clip.create_model_and_transforms(SHAPES_CLIP_NAME, pretrained=<folder>/open_clip_model.safetensors)`` works
  too, as does ``open_clip.create_model_and_transforms("local-dir:" + folder)``.
* ``shapes-vlm``: a transformers image-text-to-text model (a tiny FastVLM: a timm ResNet tower and a Llama; see
  :mod:`imgalign.pretrain.vlm`) with its processor (a LLaVA processor), loaded by
  ``AutoModelForImageTextToText`` / ``AutoProcessor``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from imgalign.hub import ModelNotFoundError, embedded_path

SHAPES_CLIP_NAME = "shapes-clip-tiny"
"""The open_clip model-config name of the embedded shapes CLIP (``imgalign.pretrain.clip.MODEL_NAME``)."""
CLIP_WEIGHTS = "open_clip_model.safetensors"


def _require(folder: Path, files: tuple[str, ...], name: str) -> None:
    missing = [f for f in files if not (folder / f).is_file()]
    if missing:
        raise ModelNotFoundError(
            f"embedded model {name!r} in {folder} is incomplete (missing {', '.join(missing)}); reinstall imgalign "
            f"or recreate it with `imgalign world pretrain --component {name.removeprefix('shapes-')}`"
        )


def register_shapes_clip(folder: str | Path | None = None) -> Path:
    """Register the shapes CLIP's open_clip config from `folder` (default: the embedded one); returns the folder.

    Always re-registers, so the name refers to this folder's config even if another config was registered under
    it earlier in the process (e.g. by a pretraining run with a different size)."""
    import open_clip

    folder = Path(folder) if folder is not None else embedded_path("shapes-clip")
    _require(folder, (f"{SHAPES_CLIP_NAME}.json",), "shapes-clip")
    open_clip.add_model_config(folder / f"{SHAPES_CLIP_NAME}.json")
    return folder


def load_shapes_clip(
    device: Any = "cpu", dtype: Any = None, folder: str | Path | None = None
) -> tuple[Any, Any, Any]:
    """(model, preprocess, tokenizer) of the embedded shapes CLIP, in eval mode on `device` as `dtype`
    (default float32). `preprocess` maps a PIL image to a (3, 64, 64) tensor; `tokenizer` is open_clip's."""
    import open_clip
    import torch

    dtype = torch.float32 if dtype is None else dtype
    folder = register_shapes_clip(folder)
    _require(folder, (CLIP_WEIGHTS, "open_clip_config.json"), "shapes-clip")
    model, _, preprocess = open_clip.create_model_and_transforms(
        SHAPES_CLIP_NAME, pretrained=str(folder / CLIP_WEIGHTS), device=device
    )
    model = model.to(device=device, dtype=dtype).eval()
    tokenizer = open_clip.get_tokenizer(SHAPES_CLIP_NAME)
    return model, preprocess, tokenizer


def load_shapes_vlm(
    device: Any = "cpu", dtype: Any = None, folder: str | Path | None = None
) -> tuple[Any, Any]:
    """(model, processor) of the embedded shapes VLM (``AutoModelForImageTextToText``, ``AutoProcessor``), in eval
    mode on `device` as `dtype` (default float32)."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    dtype = torch.float32 if dtype is None else dtype
    folder = Path(folder) if folder is not None else embedded_path("shapes-vlm")
    _require(folder, ("config.json", "model.safetensors", "tokenizer.json"), "shapes-vlm")
    processor = AutoProcessor.from_pretrained(folder)
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=dtype).to(device).eval()
    return model, processor

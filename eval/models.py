"""The sampler settings each model family needs (``imgalign grid``, real-model evaluation): the shapes family is
sampled with the settings it was trained for, other pipelines with their own defaults. Models load with
:func:`imgalign.pipelines.load_pipeline` and sample with :func:`imgalign.sampling.generate_images`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from imgalign.pipelines import ModelSpec

log = logging.getLogger(__name__)


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

    return architecture(ref) == architecture(cfg)


def architecture(config: Path) -> dict[str, Any]:
    """The settings of a transformer's ``config.json`` without diffusers' bookkeeping (``_class_name``, ...). A
    damaged file (cut short, hand-edited) is named: it failed with a bare "Expecting value: line 1 column 1" or, a
    JSON list, an AttributeError traceback, before the loader could say which folder was wrong."""
    try:
        cfg = json.loads(config.read_text(encoding="utf-8"))
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
        raise ValueError(f"{config} is damaged: not valid JSON ({e}); copy or save the model again") from None
    if not isinstance(cfg, dict):
        raise ValueError(
            f"{config} is damaged: a JSON {type(cfg).__name__}, not an object; copy or save the model again"
        )
    return {k: v for k, v in cfg.items() if not k.startswith("_")}


def shapes_max_sequence_length(path: str) -> int | None:
    """The shapes model was trained with a fixed number of zero 'T5' tokens (:data:`imgalign.sampling.
    MAX_SEQUENCE_LENGTH`); so was any folder of its architecture (a fine-tuned checkpoint, or a model from
    ``imgalign world pretrain``), detected as ``imgalign eval`` detects it (:func:`is_shapes_family`). Other models
    use their pipeline's default (None)."""
    return sampling_defaults(ModelSpec("", path)).get("max_sequence_length")


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

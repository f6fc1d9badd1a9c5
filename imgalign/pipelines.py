"""Loading diffusers pipelines: the one loader behind every command, the trainer's export and the Python API.

Model syntax (``imgalign eval/grid --model``, :func:`load_pipeline`):

* ``shapes`` -- an embedded model name (:mod:`imgalign.hub`);
* ``PATH`` -- a full pipeline folder (``model_index.json``; what ``save_pretrained`` and imgalign's full fine-tune
  checkpoints write) or a Hub id already in the local cache;
* ``BASE+OVERLAY`` -- a base pipeline with a fine-tuned part on top. `OVERLAY` is a folder holding one of: a PEFT
  LoRA adapter of the transformer (``adapter_config.json``), a diffusers LoRA (``pytorch_lora_weights.safetensors``),
  a full transformer (``config.json`` + weights) or a ``transformer/`` subfolder. Example:
  ``--model ft=shapes+path/to/peft_adapter``.
* ``CHECKPOINT`` -- a LoRA checkpoint of imgalign's trainer alone: its ``imgalign_model.json`` names the base
  (``--model ft=runs/grpo/checkpoints/step-000500``).

Every path is checked before anything loads (:func:`check_model_spec`): a missing folder, a folder without
``model_index.json`` or one missing a component's files raises :class:`IncompleteModelError` naming what is missing.
Components a pipeline was saved without (``[null, null]`` in ``model_index.json``, e.g. SD3 without T5) load as
None, the documented way to use SD3 without its third text encoder.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from imgalign.hub import has_weight_files, hub_offline, looks_like_path, tilde_hint

log = logging.getLogger(__name__)

LORA_FILES = ("pytorch_lora_weights.safetensors", "pytorch_lora_weights.bin")


class IncompleteModelError(FileNotFoundError):
    """A model folder that is missing or lacks files a pipeline needs."""


@dataclass(frozen=True)
class ModelSpec:
    label: str
    base: str
    overlay: str | None = None

    def __str__(self) -> str:
        return self.base + (f"+{self.overlay}" if self.overlay else "")


def parse_model_arg(arg: str) -> ModelSpec:
    """``LABEL=PATH`` or ``LABEL=BASE+OVERLAY`` -> ModelSpec; a bare PATH is labelled by its last path part. An
    existing path is taken whole, so folder names may contain ``=`` and ``+`` (``runs/lr=1e-4/checkpoints/...``)."""
    try:
        whole = Path(arg).exists()
    except OSError:  # a LABEL of over 255 bytes: "path 'LABEL=...' is too long for the file system"
        whole = False
    if whole:
        return ModelSpec(Path(arg).name or arg, arg)
    label, sep, rest = arg.partition("=")
    if not sep:
        label, rest = "", arg
    label, rest = label.strip(), rest.strip()
    if not rest:
        raise ValueError(f"--model {arg!r}: expected LABEL=PATH or LABEL=BASE+OVERLAY")
    if Path(rest).exists():
        return ModelSpec(label or Path(rest).name or rest, rest)
    base, plus, overlay = (part.strip() for part in rest.partition("+"))  # 'shapes + ft' is shapes+ft
    if plus and (not base or not overlay):
        raise ValueError(f"--model {arg!r}: BASE+OVERLAY needs both parts")
    if not label:
        label = Path(overlay or base).name or base
    return ModelSpec(label, base, overlay or None)


def is_lora_folder(path: Path) -> bool:
    """Whether `path` holds a PEFT or diffusers LoRA (what BASE+OVERLAY takes after the '+')."""
    return (path / "adapter_config.json").is_file() or any((path / f).is_file() for f in LORA_FILES)


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
        + _checkpoint_hint(path)
    )


def _checkpoint_hint(path: Path) -> str:
    """'; ...' naming the checkpoint to give after the '+' when `path` is a run folder, its checkpoints/ folder or
    a checkpoint's trainer_state/ (shapes+RUN said only which files were expected, while --model RUN names the
    checkpoint, :func:`check_pipeline_folder`); else ''."""
    runs = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    steps = step_folders(runs)
    if steps:
        what = "a training run folder" if runs != path else "a run's checkpoints folder"
        return f"; it is {what}: give one of its checkpoints, e.g. {str(runs / steps[-1])!r}"
    if path.name == "trainer_state" and (path / "state.json").is_file():
        return f"; it is the training state of checkpoint {str(path.parent)!r}: give the checkpoint itself"
    return ""


# the components an SD3 or FLUX pipeline generates with; of the others, SD3's T5 (text_encoder_3, tokenizer_3: the
# shapes model has none) and the IP-adapter parts may be saved as null
NEEDED_COMPONENTS = (
    "transformer",
    "vae",
    "scheduler",
    "text_encoder",
    "tokenizer",
    "text_encoder_2",
    "tokenizer_2",
)


def _config_hint(config: Path) -> str:
    """What a folder with `config` and no model_index.json holds, for the error that it is no pipeline: one part
    of a diffusers pipeline (a ``_class_name``), or a transformers model (a ``model_type``: the shapes VLM, a CLIP,
    a detector)."""
    try:
        cfg = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    if not isinstance(cfg, dict):
        return ""
    if cfg.get("_class_name"):
        return (
            f"; it holds one part of a pipeline ({cfg['_class_name']}): give the pipeline folder, or BASE+"
            f"{config.parent} to put this part on a base pipeline"
        )
    if cfg.get("model_type"):
        return (
            f"; it holds a transformers {cfg['model_type']!r} model, such as a reward or judge model, not a "
            "text-to-image pipeline"
        )
    return ""


def step_folders(folder: Path) -> list[str]:
    """Names of the checkpoint folders ``step-NNNNNN`` in `folder`, oldest first; a ``step-N.old`` (a checkpoint
    being replaced, or a stale copy) is none: the hints named it as the run's checkpoint to give."""
    from imgalign.trainers.checkpoint import STEP_RE, step_of

    steps = [p for p in folder.glob("step-*") if p.is_dir() and STEP_RE.match(p.name)]
    return [p.name for p in sorted(steps, key=step_of)]


def check_pipeline_folder(path: Path) -> None:
    """Raise :class:`IncompleteModelError` naming what is missing from a diffusers pipeline folder."""
    path = Path(path)
    if not path.is_dir():
        raise IncompleteModelError(
            f"model folder {str(path)!r} {'is a file' if path.exists() else 'does not exist'}; give an embedded "
            "name (e.g. 'shapes') or a folder written by `save_pretrained`"
        )
    index = path / "model_index.json"
    if not index.is_file() and (path / "checkpoints").is_dir():
        ckpts = step_folders(path / "checkpoints")
        hint = f", e.g. {str(path / 'checkpoints' / ckpts[-1])!r}" if ckpts else " (it has none yet)"
        raise IncompleteModelError(
            f"{str(path)!r} is a training run folder, not a model; give one of its checkpoints{hint}"
        )
    steps = step_folders(path) if not index.is_file() else []
    if steps:  # RUN/checkpoints itself
        raise IncompleteModelError(
            f"{str(path)!r} holds a run's checkpoints, not a model; give one of them, e.g. "
            f"{str(path / steps[-1])!r}"
        )
    if not index.is_file() and (path / "trainer_state").is_dir():  # a LoRA checkpoint without its weights
        raise IncompleteModelError(
            f"training checkpoint {str(path)!r} is incomplete: it holds neither its LoRA weights "
            f"({LORA_FILES[0]}) nor a model_index.json; use another checkpoint of the run, or resume the run to "
            "write it again"
        )
    if not index.is_file() and path.name == "trainer_state" and (path / "state.json").is_file():
        raise IncompleteModelError(  # (the folder inside a checkpoint, for a resume)
            f"{str(path)!r} is the training state of checkpoint {str(path.parent)!r}, which imgalign train --resume "
            f"reads, not a model; give the checkpoint itself, {str(path.parent)!r}"
        )
    if not index.is_file():
        # e.g. the --out of `imgalign world pretrain`, which holds its model in shapes-t2i/ (and a .tmp while writing)
        found = path.glob("*/model_index.json")  # glob passes over a folder it cannot read
        inner = sorted(f.parent for f in found if f.parent.suffix not in (".tmp", ".old"))
        hint = f"; it holds the pipeline folder {str(inner[0])!r}: give that" if inner else ""
        if not inner and (path / "open_clip_config.json").is_file():  # e.g. the embedded shapes-clip's folder
            hint = "; it holds an open_clip CLIP, a reward model (clip:model=...), not a text-to-image model"
        elif not inner and (path / "config.json").is_file():
            hint = _config_hint(path / "config.json")
        raise IncompleteModelError(
            f"{index} is missing: {str(path)!r} is not a diffusers pipeline folder; expected a folder written by "
            f"`save_pretrained`, an embedded name (shapes) or BASE+OVERLAY{hint}"
        )
    # a copy cut short or a hand edit: a bare JSON error that named no file, or (a list) an AttributeError
    try:
        spec = json.loads(index.read_text(encoding="utf-8"))
        why = "" if isinstance(spec, dict) else "not a JSON object"
    except ValueError as e:
        spec, why = {}, f"not valid JSON ({e})"
    # a component entry is a [library, class] pair ([null, null] when absent): [] failed with an IndexError
    why = why or "; ".join(
        f"its {name!r} entry is {value!r}, not a [library, class] pair"
        for name, value in spec.items()
        if not name.startswith("_") and isinstance(value, list) and len(value) != 2
    )
    if not why and "_class_name" not in spec:  # was diffusers' KeyError, shown as "error: _class_name"
        why = "it has no '_class_name' entry (the pipeline class, e.g. StableDiffusion3Pipeline)"
    if why:
        raise IncompleteModelError(f"{index} is damaged: {why}; {_folder_fix(path)}")
    # saved without a part it cannot generate without (from_pretrained(..., text_encoder_2=None), then
    # save_pretrained): the first prompt failed with "'NoneType' object has no attribute 'tokenize'"
    nulled = [
        n for n in NEEDED_COMPONENTS if isinstance(spec.get(n), list) and spec[n] and spec[n][0] is None
    ]
    if nulled:
        raise IncompleteModelError(
            f"model folder {str(path)!r} was saved without its {', '.join(nulled)} (null in its model_index.json), "
            f"which its {spec.get('_class_name', 'pipeline')} needs to generate: save the pipeline again with "
            "every component loaded (only SD3's T5, text_encoder_3 and tokenizer_3, may be left out)"
        )
    missing = []
    for name, value in spec.items():
        if name.startswith("_") or not isinstance(value, list) or value[0] is None:
            continue
        sub = path / name
        if not sub.is_dir() or not any(sub.iterdir()):
            missing.append(f"{name}/")
            continue
        has_weights = has_weight_files(sub)
        if "model" in name or "encoder" in name or name in ("transformer", "vae"):
            if not (sub / "config.json").is_file():
                missing.append(f"{name}/config.json")
            if not has_weights:
                missing.append(f"{name}/ weights (*.safetensors)")
            missing += missing_shards(sub) + truncated_weights(sub)
    if missing:
        raise IncompleteModelError(
            f"model folder {str(path)!r} is incomplete; missing: {', '.join(missing)}; {_folder_fix(path)}"
        )


def _folder_fix(path: Path) -> str:
    """What to do about a pipeline folder with missing or damaged files: a training checkpoint, the embedded model
    or a folder of the user's."""
    from imgalign.hub import ASSETS

    if (path / "trainer_state").is_dir():
        return "it is a training checkpoint: use another checkpoint of the run, or resume the run to write it again"
    if path.resolve().parent == ASSETS.resolve():
        return "it is an embedded model: reinstall imgalign (pip install -e .)"
    return "recreate it (save_pretrained, or `imgalign world pretrain --component t2i` for a shapes model)"


SHARD_RE = re.compile(r"(.+)-\d+-of-\d+\.safetensors")
"""A weight shard's file name (``diffusion_pytorch_model-00002-of-00003.safetensors``); group 1 its set's name."""


def missing_shards(folder: Path) -> list[str]:
    """The weight shards a component folder's ``*.index.json`` names that are not there, or the index of shards
    (``*-00001-of-00002.safetensors``) that is: the loader failed only once other components had loaded, with
    "does not appear to have a file named ..." or "no file named diffusion_pytorch_model.bin"."""
    gone = []
    indexes = sorted(folder.glob("*.index.json"))
    for index in indexes:
        try:
            files = set(json.loads(index.read_text()).get("weight_map", {}).values())
        except (OSError, ValueError, AttributeError):
            gone.append(f"{folder.name}/{index.name} (not a JSON index)")
            continue
        gone += [f"{folder.name}/{f}" for f in sorted(files) if not (folder / f).is_file()]
    # any shard of a set stands for it: a set whose first shard is missing too was let through to the loader
    sets = sorted({m.group(1) for f in folder.glob("*.safetensors") if (m := SHARD_RE.fullmatch(f.name))})
    if sets and not indexes:
        gone.append(f"{folder.name}/{sets[0]}.safetensors.index.json")
    return gone


def truncated_weights(folder: Path) -> list[str]:
    """The ``*.safetensors`` files in a component folder that end before the data their header describes (a copy
    or download cut short): the loader failed only once other components had loaded, with "Unable to load weights
    from checkpoint file" and no reason. A file cut inside its header is named too, and so is an empty one; one whose
    first 8 bytes give no plausible header size (a Git LFS pointer, which diffusers names itself) is left to the
    loader."""
    cut = []
    for f in sorted(folder.glob("*.safetensors")):
        try:
            with open(f, "rb") as fh:
                first = fh.read(8)
                n = int.from_bytes(first, "little")
                if not first:  # an empty file (a save killed, or a full disk, before its first byte)
                    cut.append(f"the rest of {folder.name}/{f.name} (0 bytes there: the file is empty)")
                    continue
                if len(first) < 8 or not 0 < n < 100_000_000:
                    continue
                raw = fh.read(n)
                size = f.stat().st_size
        except OSError:
            continue
        if len(raw) < n:  # the 8-byte size promises a header the file does not hold
            cut.append(
                f"the rest of {folder.name}/{f.name} ({size} of more than {8 + n} bytes there: truncated)"
            )
            continue
        try:
            header = json.loads(raw)
            ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            continue
        want = 8 + n + max(ends, default=0)
        if size < want:
            cut.append(f"the rest of {folder.name}/{f.name} ({size} of {want} bytes there: truncated)")
    return cut


def check_model_spec(spec: ModelSpec) -> ModelSpec:
    """Fail before anything loads when a path does not exist or is not a (complete) model folder; returns the spec
    with a LoRA checkpoint's base filled in from its ``imgalign_model.json`` (what imgalign's trainer writes)."""
    from imgalign.hub import EMBEDDED, embedded_path

    if spec.base in EMBEDDED:
        check_pipeline_folder(embedded_path(spec.base))  # raises when its files are missing
    else:
        p = Path(spec.base)
        path_like = looks_like_path(spec.base)
        if p.is_dir():
            if is_lora_folder(p):
                if spec.overlay is None:
                    base = recorded_base(p)
                    if base:
                        # a base the user never typed that cannot load: say where it came from
                        try:
                            return check_model_spec(ModelSpec(spec.label, base, spec.base))
                        except IncompleteModelError as e:
                            raise IncompleteModelError(
                                f"LoRA checkpoint {spec.base!r} names its base model {base!r} in "
                                f"imgalign_model.json, which cannot load ({e}); give the base as "
                                f"{spec.label}=BASE+{spec.base}"
                            ) from None
                if spec.overlay is not None and is_lora_folder(Path(spec.overlay)):
                    # LORA+LORA: "the base comes first" would have repeated the pair swapped
                    raise ValueError(
                        f"model {spec.label!r}: {spec.base!r} and {spec.overlay!r} are both LoRA folders; "
                        "BASE+OVERLAY takes a base model (an embedded name, a pipeline folder or a Hub id) before "
                        "the '+' and one fine-tuned folder after it, e.g. "
                        f"{spec.label}={recorded_base(Path(spec.overlay)) or 'BASE'}+{spec.overlay}"
                    )
                if spec.overlay is not None:  # the two parts swapped: LORA+BASE
                    raise ValueError(
                        f"model {spec.label!r}: {spec.base!r} is a LoRA folder, given before the '+'; the base "
                        f"model comes first: {spec.label}={spec.overlay}+{spec.base}"
                    )
                raise ValueError(
                    f"model {spec.label!r}: {spec.base!r} is a LoRA folder that does not name its base model; "
                    f"give it as {spec.label}=BASE+{spec.base}"
                )
            check_pipeline_folder(p)
        elif path_like or not hub_id_available(spec.base):
            what = "is a file, not a model folder" if p.exists() else "does not exist"
            if tilde_hint(spec.base) and not p.exists():
                what += tilde_hint(spec.base)
            # e.g. a config run from another folder
            elif path_like and not p.exists() and not p.is_absolute():
                what += f" (a relative path is read from the working folder {Path.cwd()})"
            elif not path_like and hub_id_valid(spec.base):  # offline, and not in the local cache
                raise IncompleteModelError(
                    f"model {spec.label!r}: {spec.base!r} does not exist as a local folder, nor as a Hub id in the "
                    "local Hugging Face cache (HF_HUB_OFFLINE is set: the Hub is not asked); check its spelling, "
                    f"download it once with the network on (hf download {spec.base}), or give the folder it was "
                    "saved to"
                )
            raise IncompleteModelError(
                f"model {spec.label!r}: {spec.base!r} {what}; give an embedded name (shapes), a pipeline "
                "folder or a Hub id already downloaded"
            )
    if spec.overlay is not None:
        op = Path(spec.overlay)
        if not op.is_dir():
            raise IncompleteModelError(
                f"model {spec.label!r}: fine-tuned folder {spec.overlay!r} "
                + (
                    "is a file; give the folder a training run saved (a checkpoint)"
                    if op.exists()
                    else "does not exist"
                    + (
                        "; BASE+OVERLAY takes one '+' between the two parts"
                        if spec.overlay.startswith("+") or spec.overlay.endswith("+")
                        else ""
                    )
                )
            )
        kind = overlay_kind(op)
        check_overlay_family(spec, op)
        folder = op / "transformer" if kind == "transformer-subfolder" else op
        cut = truncated_weights(folder)
        if cut:  # failed once the base had loaded, with "Unable to load weights" and no reason
            raise ValueError(  # not IncompleteModelError: a checkpoint alone reads that as its base failing
                f"model {spec.label!r}: fine-tuned folder {spec.overlay!r} is incomplete; missing: {', '.join(cut)}; "
                "use another checkpoint of the run, or save it again"
            )
        if kind.startswith("transformer"):
            if not has_weight_files(folder):
                raise IncompleteModelError(
                    f"model {spec.label!r}: fine-tuned transformer folder {str(folder)!r} has a config.json but "
                    "no weights (*.safetensors); use another checkpoint of the run, or save the transformer again"
                )
            # a transformer of another class or size fails now, not after the base loads
            base = embedded_path(spec.base) if spec.base in EMBEDDED else Path(spec.base)
            try:
                want = json.loads((base / "transformer" / "config.json").read_text())
                got = json.loads((folder / "config.json").read_text())
            except (OSError, ValueError):
                want = got = {}  # a Hub id or a pipeline without a transformer: checked once loaded
            # the sizes the base's text encoders and autoencoder fix (a mismatch failed only when sampling)
            keys = ("_class_name", "in_channels", "joint_attention_dim", "pooled_projection_dim")
            differ = [k for k in keys if k in want and k in got and want[k] != got[k]]
            if differ:
                # a checkpoint (or its transformer/) that records its base: it said "give the base model it was
                # trained on", unnamed, as lora_mismatch_message does not
                ckpt = folder.parent
                try:
                    recorded = recorded_base(ckpt) if folder.name == "transformer" else None
                except ValueError:
                    recorded = None
                fix = f"give the base model it was trained on, as BASE+{spec.overlay}"
                if recorded:
                    fix = f"it was trained on {recorded!r} (its imgalign_model.json): give {recorded}+{spec.overlay}"
                    if (ckpt / "model_index.json").is_file():
                        fix += f", or the checkpoint alone (--model {ckpt})"
                raise ValueError(
                    f"model {spec.label!r}: the transformer in {str(folder)!r} does not fit base model "
                    f"{spec.base!r} ("
                    + ", ".join(f"{k} {got[k]} against the base's {want[k]}" for k in differ)
                    + f"); {fix}"
                )
    return spec


def same_model(a: str, b: str) -> bool:
    """Whether two model names (embedded name, path or Hub id) name the same model: compared as resolved paths."""
    from imgalign.hub import resolve

    return Path(resolve(a)).resolve() == Path(resolve(b)).resolve()


def warn_other_base(base: str, overlay: Path) -> None:
    """Warn when a checkpoint is put on a base other than the one its ``imgalign_model.json`` records. Not an
    error: a re-pretrained model of the same architecture, or a copy of the base at another path, loads fine."""
    try:
        recorded = recorded_base(overlay)
    # a damaged record: the base given is what the user asked for (the error's advice)
    except ValueError as e:
        log.warning("%s; loading it on %r as given", e, base)
        return
    if recorded and not same_model(base, recorded):
        log.warning(
            "%s was trained on base model %r (its imgalign_model.json), but is loaded on %r; this works only when "
            "the two share the architecture (give --model %s alone to use the recorded base)",
            overlay,
            recorded,
            base,
            overlay,
        )


def check_overlay_family(spec: ModelSpec, overlay: Path) -> None:
    """A checkpoint whose ``imgalign_model.json`` records another family than the base pipeline's (a FLUX LoRA on
    an SD3 base) is refused before the base loads; it failed only once the base had loaded."""
    from imgalign.adapters import PIPELINE_TO_FAMILY
    from imgalign.hub import EMBEDDED, embedded_path

    info = overlay / "imgalign_model.json"
    index = (embedded_path(spec.base) if spec.base in EMBEDDED else Path(spec.base)) / "model_index.json"
    try:
        family = json.loads(info.read_text()).get("family")
        base_family = PIPELINE_TO_FAMILY.get(json.loads(index.read_text()).get("_class_name", ""))
    except (OSError, ValueError, AttributeError):
        return  # no record, or a Hub id: the loader checks once the base is loaded
    if family and base_family and family != base_family:
        raise ValueError(
            f"model {spec.label!r}: {str(overlay)!r} is a {family} fine-tune (its imgalign_model.json), but base "
            f"model {spec.base!r} is a {base_family} pipeline; give the base it was trained on"
            + (f" ({recorded_base(overlay)}+{overlay})" if recorded_base(overlay) else "")
        )


def recorded_base(folder: Path) -> str | None:
    """The base model a checkpoint names in ``imgalign_model.json`` (``base_model``), if any."""
    info = Path(folder) / "imgalign_model.json"
    if not info.is_file():
        return None
    try:
        base = json.loads(info.read_text(encoding="utf-8")).get("base_model")
    # ValueError: not JSON, or not UTF-8 (a bare codec error that named no file)
    except (ValueError, AttributeError):
        raise ValueError(
            f"{info}: not a JSON object; expected {{'base_model': ...}}; write it again, or give the base model "
            f"yourself as BASE+{folder}"
        ) from None
    return str(base) if base else None


def hub_id_valid(repo_id: str) -> bool:
    """Whether `repo_id` is spelt as a Hub id (``org/name``) may be."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        return False
    return True


def hub_id_available(repo_id: str) -> bool:
    """Whether a Hub pipeline id can load: in the local cache, or the Hub may be contacted (not offline)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(repo_id, "model_index.json")
    except ValueError:  # not a valid repo id
        return False
    return isinstance(cached, str) or not hub_offline()


def absent_components(folder: str | Path) -> dict[str, None]:
    """Components a saved pipeline left out (``[null, null]`` in ``model_index.json``, e.g. SD3 without T5), which
    ``from_pretrained`` wants passed explicitly as None. A Hub id's are read from its cached copy (a Hub pipeline
    saved without T5 failed with "expected [...] but only [...] were passed")."""
    from imgalign.hub import model_index_file

    index = model_index_file(folder)
    if not index.is_file():
        return {}
    entries = json.loads(index.read_text())
    return {
        k: None
        for k, v in entries.items()
        if not k.startswith("_") and (v is None or (isinstance(v, list) and all(x is None for x in v)))
    }


TRUNCATION_NOTICE = "The following part of your input was truncated"
"""The start of diffusers' notice of a prompt cut at a text encoder's token limit (SD3, FLUX), logged per call."""


class MessageFilter(logging.Filter):
    """Drops the log records whose message holds `text`."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


LENGTH_WARNING = "sequence-length-is-longer-than-the-specified-maximum"
"""transformers' key (in a tokenizer's ``deprecation_warnings``) of its "Token indices sequence length is longer
than the specified maximum ... indexing errors" line, said once per tokenizer."""


def length_warning_said(pipe: Any) -> dict[int, tuple[Any, Any]]:
    """Mark transformers' "Token indices sequence length is longer than the specified maximum ... indexing errors"
    line as said for each tokenizer of `pipe` (transformers says it once per tokenizer unless told it has): the
    caller has named the long prompts itself. Returns each tokenizer's mark before (id -> (tokenizer, mark or
    None)), for :func:`restore_length_warning`."""
    before: dict[int, tuple[Any, Any]] = {}
    for name in ("tokenizer", "tokenizer_2", "tokenizer_3"):
        tok = getattr(pipe, name, None)
        if tok is not None:
            before.setdefault(id(tok), (tok, tok.deprecation_warnings.get(LENGTH_WARNING)))
            tok.deprecation_warnings[LENGTH_WARNING] = True
    return before


def restore_length_warning(before: dict[int, tuple[Any, Any]]) -> None:
    """Put back the tokenizers' marks :func:`length_warning_said` returned (None: not said yet)."""
    for tok, mark in before.values():
        if mark is None:
            tok.deprecation_warnings.pop(LENGTH_WARNING, None)
        else:
            tok.deprecation_warnings[LENGTH_WARNING] = mark


@contextlib.contextmanager
def once_per_call(logger_name: str, text: str) -> Iterator[None]:
    """Within the block, logger `logger_name` passes the first record whose message holds `text` and drops the
    rest."""
    seen: list[bool] = []

    class Once(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            if text not in record.getMessage():
                return True
            seen.append(True)
            return len(seen) == 1

    logger, f = logging.getLogger(logger_name), Once()
    logger.addFilter(f)
    try:
        yield
    finally:
        logger.removeFilter(f)


@contextlib.contextmanager
def quiet_absent_components() -> Iterator[None]:
    """Within the block, ``save_pretrained`` does not warn about components the pipeline was built without."""
    logger = logging.getLogger("diffusers.pipelines.pipeline_utils")
    # diffusers' "self.<name>=None ... cannot be saved", logged for each absent part on every save_pretrained of a
    # pipeline without an optional component (SD3 without T5), although model_index.json records the part as
    # absent and from_pretrained loads the folder as it should
    f = MessageFilter("=None of type <class 'NoneType'> cannot be saved")
    logger.addFilter(f)
    try:
        yield
    finally:
        logger.removeFilter(f)


@contextlib.contextmanager
def quiet_failed_lora_load() -> Iterator[None]:
    """Within the block, diffusers does not log "Loading default_0 was unsuccessful with the following error" with
    the whole error (a LoRA on a base of another size: one size-mismatch line per weight, 4 on the tiny test model,
    hundreds on SD3.5) before re-raising it: :func:`lora_mismatch_message` names the cause and the base to give.
    The block's warnings are held back and given only when it ends without an error: a LoRA of another base printed
    peft's "RuntimeWarning: While injecting the PEFT adapters, an inconsistency was discovered ..." (one long line
    of module names) before that error."""
    f = MessageFilter("was unsuccessful with the following error")
    logger = logging.getLogger("diffusers.loaders.peft")
    logger.addFilter(f)
    try:
        with warnings.catch_warnings(record=True) as held:
            yield
    finally:
        logger.removeFilter(f)
    for w in held:  # (only reached when the block raised nothing)
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


@contextlib.contextmanager
def quiet_text_encoder_lora_warning(folder: Path) -> Iterator[None]:
    """Within the block, diffusers does not warn "No LoRA keys associated to CLIPTextModelWithProjection ... open
    an issue" for each text encoder when the LoRA file holds no text-encoder weights (imgalign's LoRA checkpoints
    train the transformer only): two long warnings on every grid/eval of a LoRA checkpoint, about nothing wrong."""
    f = MessageFilter("No LoRA keys associated to")
    logger = logging.getLogger("diffusers.loaders.lora_base")
    weights = Path(folder) / LORA_FILES[0]
    try:
        from safetensors import safe_open

        with safe_open(str(weights), "pt") as sf:
            text_keys = any(k.startswith(("text_encoder", "te_", "lora_te")) for k in sf.keys())
    except Exception:  # a .bin file or an unreadable one: the loader speaks for itself
        text_keys = True
    if not text_keys:
        logger.addFilter(f)
    try:
        yield
    finally:
        logger.removeFilter(f)


def ignores_guidance(transformer: Any) -> bool:
    """Whether a denoiser has no guidance embedding (``guidance_embeds`` false: a FLUX.1-schnell-like transformer),
    so a guidance scale changes nothing it samples (FluxPipeline ignores it silently) or trains. A null in a
    hand-edited config is false too: diffusers builds no guidance embedding for it (``if guidance_embeds``). A
    denoiser without the setting (SD3) is not one."""
    return not getattr(getattr(transformer, "config", None), "guidance_embeds", True)


def check_weights_loaded(pipe: Any, base: str | Path) -> None:
    """Refuse a pipeline a component of which holds tensors its weights file did not fill: diffusers leaves them on
    the meta device (it only logs the unused and missing names), and ``pipe.to(device)`` then failed with a
    NotImplementedError traceback ("Cannot copy out of meta tensor"). A component folder whose weights file is
    another component's (the VAE's copied over the transformer's by hand) loads this way."""
    for name, module in getattr(pipe, "components", {}).items():
        if not isinstance(module, torch.nn.Module):
            continue
        empty = [n for n, t in [*module.named_parameters(), *module.named_buffers()] if t.is_meta]
        if empty:
            folder = Path(base) / name if Path(base).is_dir() else f"{base} ({name})"
            raise ValueError(
                f"cannot load the pipeline {str(base)!r}: the weights in {folder} lack {len(empty)} of the {name}'s "
                f"tensors (e.g. {empty[0]}): a weights file of another component or model copied there? "
                f"Restore the model's own {name} weights"
            )


def load_pipeline(
    model: ModelSpec | str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> Any:
    """A diffusers pipeline for `model`: an embedded name, a pipeline folder or Hub id, an imgalign checkpoint
    (full, or LoRA naming its base) or ``BASE+OVERLAY`` (module docstring). The pipeline class comes from the
    folder's ``model_index.json``; the progress bar is off."""
    from diffusers import DiffusionPipeline

    from imgalign.hub import naming_pipeline, resolve

    if isinstance(model, Path):
        model = ModelSpec(model.name, str(model))
    spec = check_model_spec(model if isinstance(model, ModelSpec) else parse_model_arg(model))
    base = resolve(spec.base)
    try:
        with naming_pipeline(base):
            pipe = DiffusionPipeline.from_pretrained(base, dtype=dtype, **absent_components(base))
    except OSError as e:
        if Path(base).is_dir():
            raise
        # a Hub id neither cached nor reachable: diffusers' message pointed to "the stacktrace above" (none is
        # shown) and to a loader argument, local_files_only=False, that no command takes
        said = str(e).split(" Please check out the root cause")[0].strip()
        said = re.sub(r"\s*To enable repo look-ups.*?as input\.", "", said)
        raise IncompleteModelError(
            f"model {spec.label!r}: {spec.base!r} is no local folder, and the Hub id could not be loaded from the "
            f"local Hugging Face cache nor from the Hub ({said}); check its spelling and the network, download it "
            f"once (hf download {spec.base}), or give the folder it was saved to"
        ) from e
    check_weights_loaded(pipe, base)
    if spec.overlay is not None:
        # warned here, not in check_model_spec: commands call that first too, and the warning would show twice
        warn_other_base(spec.base, Path(spec.overlay))
        apply_overlay(pipe, Path(spec.overlay), dtype, base=spec.base)
    with once_per_call("diffusers.pipelines.pipeline_utils", "cannot run with `cpu` device"):
        pipe.to(device)  # (diffusers' fp16-on-CPU warning came once per module: four times for SD3)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def denoiser_name(pipe: Any) -> str:
    return "transformer" if getattr(pipe, "transformer", None) is not None else "unet"


def apply_overlay(pipe: Any, path: Path, dtype: torch.dtype = torch.float32, base: str = "") -> None:
    """Put a fine-tuned part on a loaded base pipeline (see the module docstring for the folder kinds); `base`
    names the pipeline in the error raised when a LoRA does not fit it."""
    kind = overlay_kind(path)
    name = denoiser_name(pipe)
    denoiser = getattr(pipe, name)
    if kind == "peft":
        from peft import PeftModel

        merged = PeftModel.from_pretrained(denoiser, str(path)).merge_and_unload()
        setattr(pipe, name, merged)
    elif kind == "lora":
        try:
            with quiet_text_encoder_lora_warning(path), quiet_failed_lora_load():
                pipe.load_lora_weights(str(path))
        except (RuntimeError, ValueError) as e:  # torch: "size mismatch for ...lora_B"; peft: missing modules
            raise ValueError(lora_mismatch_message(path, base, e)) from e
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


def lora_mismatch_message(path: Path, base: str, error: Exception) -> str:
    """Why a LoRA checkpoint did not load onto `base`, and what to give instead."""
    recorded = recorded_base(path)
    given = f"base model {base!r}" if base else "the given base model"
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    # torch's message: "Error(s) in loading state_dict for X:", then the first mismatching weight
    cause = " ".join(lines[:2]) or type(error).__name__
    if recorded:
        fix = f"give its recorded base ({recorded}+{path}) or the checkpoint alone (--model {path})"
        trained = f"was trained on {recorded!r} (its imgalign_model.json)"
    else:
        fix = "give the base model it was trained on, as BASE+" + str(path)
        trained = "was likely trained on another base model"
    return f"LoRA checkpoint {str(path)!r} does not fit {given}: it {trained}; {fix} (loader: {cause})"

"""``clip``: CLIPScore with any open_clip model (Hessel et al. 2021, "CLIPScore", eq. 1).

CLIPScore(c, v) = w * max(cos(E_I(v), E_T(c)), 0) with w = 2.5, the paper's rescaling (it stretches the typical
cosine range of ViT-B/32, about [0, 0.4], towards [0, 1]). ``weight=`` (> 0) changes w; ``weight=1`` gives the
clipped cosine; ``clamp=false`` drops the max(·, 0) (an RL reward then still ranks images whose cosines are all
negative).
Models:

* ``model=shapes-clip`` (default): the embedded shapes CLIP;
* ``model=ViT-B-32,pretrained=openai``: an open_clip architecture with a pretrained tag (cached weights; nothing is
  downloaded when ``HF_HUB_OFFLINE=1``) or ``pretrained=/path/to/checkpoint.safetensors``;
* ``model=local-dir:/path`` or ``model=/path`` (a folder with ``open_clip_config.json`` and weights);
* a transformers ``CLIPModel`` (``config.json`` with ``model_type: clip``), as a folder or a Hub id in the local
  cache, e.g. ``model=openai/clip-vit-large-patch14``. Its processor is read from the same place, or from
  ``processor=`` (PickScore ships without one: ``model=yuvalkirstain/PickScore_v1,``
  ``processor=laion/CLIP-ViT-H-14-laion2B-s32B-b79K,clamp=false``; PickScore itself is that cosine times the model's
  logit scale, so ``weight=`` that scale gives its numbers).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from imgalign.hub import load_error_reason, quiet_open_clip_errors, tilde_hint
from imgalign.rewards.base import Reward, RewardOutput, as_bool, check_at_least, excerpt, register_reward

log = logging.getLogger(__name__)
CLIPSCORE_W = 2.5  # Hessel et al. 2021


def clipscore(
    img_emb: torch.Tensor, txt_emb: torch.Tensor, w: float = CLIPSCORE_W, clamp: bool = True
) -> torch.Tensor:
    """CLIPScore = w * max(cos(img, txt), 0) for matched rows (w * cos when clamp=False).
    img_emb, txt_emb: (B, D) -> (B,)."""
    cos = torch.nn.functional.cosine_similarity(img_emb.float(), txt_emb.float(), dim=-1)  # (B,)
    return w * (cos.clamp(min=0) if clamp else cos)


def cut_prompts(tokenizer: Any, prompts: list[str]) -> list[int]:
    """Indices of the prompts longer than the tokenizer's context (start and end tokens included), which its
    call cuts silently, so their score ignores the rest. Empty for a tokenizer without ``encode`` and
    ``context_length`` (open_clip's Hugging Face tokenizers), where the length is not known here."""
    encode, n = getattr(tokenizer, "encode", None), getattr(tokenizer, "context_length", None)
    if encode is None or not isinstance(n, int):
        return []
    return [i for i, p in enumerate(prompts) if len(encode(p)) + 2 > n]


def _split_name(name: str, pretrained: str | None) -> tuple[str, str | None]:
    """Normalise the accepted model strings to open_clip's (model_name, pretrained)."""
    if name.startswith("open_clip:"):
        name = name.split(":", 1)[1]
    if "@" in name and not name.startswith("local-dir:"):
        name, pretrained = name.split("@", 1)
    if not name.startswith(("local-dir:", "hf-hub:")) and os.path.isdir(name):
        name = f"local-dir:{name}"
    return name, pretrained or None


def check_open_clip_weights(model_name: str, pretrained: str | None) -> None:
    """Refuse what open_clip would build with random weights after only a logged warning: a ``local-dir:`` folder
    without a weights file, or a known architecture without a pretrained tag or checkpoint. A reward or a judge with
    random weights scores noise. A damaged safetensors file (a folder's, or the checkpoint given as `pretrained`) is
    refused by name: open_clip failed on it with a traceback."""
    import open_clip

    from imgalign.hub import WEIGHT_SUFFIXES, check_weights, has_weight_files

    if model_name.startswith("local-dir:"):
        folder = Path(model_name.split(":", 1)[1])
        if folder.is_dir() and not has_weight_files(folder, (*WEIGHT_SUFFIXES, ".pth")):
            raise FileNotFoundError(
                f"open_clip folder {str(folder)!r} has no weights (*.safetensors, *.bin or *.pth); save the model "
                "with its weights there, or give ARCH:PRETRAINED"
            )
        check_weights(f"open_clip model {model_name!r}", folder)
    elif pretrained:  # a checkpoint file given as the tag
        check_weights(f"open_clip model {model_name!r} (pretrained={pretrained!r})", pretrained)
    elif not model_name.startswith("hf-hub:") and not pretrained and model_name in open_clip.list_models():
        raise ValueError(
            f"open_clip model {model_name!r} has no pretrained weights named and would score with random weights: "
            f"name them (tags: open_clip.list_pretrained_tags_by_model({model_name!r})): model={model_name}@TAG or "
            f"pretrained=TAG for the clip reward and open_clip: features, --clip/clip= {model_name}:TAG for the "
            "geneval judge; or give a checkpoint file or a local-dir: folder"
        )


def check_open_clip_name(model_name: str, pretrained: str | None) -> None:
    """A folder that does not exist or a misspelt architecture, said in one line: open_clip's own error named a
    missing folder as an unknown config ('-no-such-dir') and listed all of its ~150 architectures."""
    import difflib

    import open_clip

    if model_name.startswith("hf-hub:"):
        return
    if model_name.startswith("local-dir:"):
        folder = model_name.split(":", 1)[1]
        if not Path(folder).is_dir():
            raise FileNotFoundError(
                f"cannot load open_clip model: folder {folder!r} does not exist{tilde_hint(folder)}; give a folder holding "
                "open_clip_config.json and weights, ARCH with pretrained=TAG, or shapes-clip"
            )
        if not (Path(folder) / "open_clip_config.json").is_file():  # open_clip: "config file missing"
            raise FileNotFoundError(
                f"cannot load open_clip model: folder {folder!r} has no open_clip_config.json, so it is no open_clip "
                "model (a diffusers or transformers folder?); give an open_clip folder, ARCH with pretrained=TAG, "
                "or shapes-clip"
            )
        return
    archs = open_clip.list_models()
    if model_name in archs:
        return
    if Path(model_name).is_file():  # "no such folder" for a file that is there (its weights, an image) misled
        raise FileNotFoundError(
            f"cannot load open_clip model {model_name!r}: it is a file, not a folder; give the folder holding "
            "open_clip_config.json and weights, ARCH with pretrained=TAG, or shapes-clip"
        )
    if "/" in model_name or model_name.startswith((".", "~")):
        # ORG/NAME, e.g. openai/clip-vit-base-patch32, is likelier a Hub id than a folder
        hub = (
            f" (a Hub id? open_clip reads an open_clip repo as hf-hub:{model_name}; OpenAI's CLIPs are open_clip "
            "architectures with pretrained=openai, e.g. ViT-B-32)"
            if model_name.count("/") == 1 and not model_name.startswith((".", "~", "/"))
            else ""
        )
        raise FileNotFoundError(
            f"cannot load open_clip model {model_name!r}: no such folder{tilde_hint(model_name)}{hub}; give a folder "
            "holding open_clip_config.json and weights, ARCH with pretrained=TAG, or shapes-clip"
        )
    from imgalign.hub import EMBEDDED

    if model_name in EMBEDDED:  # 'shapes' (the text-to-image model), 'shapes-vlm', ...
        raise ValueError(
            f"cannot load open_clip model {model_name!r}: it is an embedded model but not a CLIP; the embedded CLIP "
            "is shapes-clip"
        )
    lower = {a.lower(): a for a in archs}
    close = [lower[c] for c in difflib.get_close_matches(model_name.lower(), list(lower), n=3)]
    raise ValueError(
        f"cannot load open_clip model {model_name!r} (pretrained={pretrained!r}): not an open_clip architecture"
        + (f" (close: {', '.join(close)})" if close else "")
        + "; give one from open_clip.list_models() with pretrained=TAG, a local-dir: folder, or shapes-clip"
    )


def load_open_clip(
    name: str, device: torch.device, dtype: torch.dtype, pretrained: str | None = None
) -> tuple[Any, Any, int, tuple[float, ...], tuple[float, ...], tuple[str, str]]:
    """Load an open_clip model by the names the module docstring lists. Returns (model in eval mode, tokenizer,
    image size, mean, std, (resize_mode, interpolation)) -- the model's own preprocessing, for
    :func:`imgalign.rewards.features.clip_preprocess`."""
    if name in ("shapes-clip", "open_clip:shapes-clip"):
        model, tokenizer = _load_shapes_clip(device, dtype)
    else:
        import open_clip

        model_name, pre = _split_name(name, pretrained)
        check_open_clip_name(model_name, pre)
        check_open_clip_weights(model_name, pre)
        try:
            with quiet_open_clip_errors():
                model = open_clip.create_model(
                    model_name,
                    pretrained=pre,
                    device=device,
                    precision=_precision(dtype),
                    force_quick_gelu=_quick_gelu(model_name, pre),
                )
        except RuntimeError as e:
            raise ValueError(
                f"cannot load open_clip model {model_name!r} (pretrained={pre!r}): {load_error_reason(e)}. "
                "Use an architecture from open_clip.list_models() with a cached pretrained tag, a checkpoint "
                "file, or a local-dir: folder"
            ) from None
        except (KeyError, TypeError) as e:
            if not model_name.startswith("local-dir:"):
                raise
            raise ValueError(incomplete_config(model_name, e)) from None
        tokenizer = open_clip.get_tokenizer(model_name)
    model = model.to(device).eval().requires_grad_(False)
    from open_clip.model import get_model_preprocess_cfg

    cfg = get_model_preprocess_cfg(model)
    size = cfg.get("size", 224)
    size = int(size[0] if isinstance(size, (tuple, list)) else size)
    mean = tuple(cfg.get("mean", (0.48145466, 0.4578275, 0.40821073)))
    std = tuple(cfg.get("std", (0.26862954, 0.26130258, 0.27577711)))
    how = (str(cfg.get("resize_mode", "shortest")), str(cfg.get("interpolation", "bicubic")))
    return model, tokenizer, size, mean, std, how


def transformers_config(name: str) -> dict[str, Any] | None:
    """The ``config.json`` of a transformers model at `name`, a folder or a Hub id in the local cache; None for
    anything else (open_clip names, ids not downloaded). A ``config.json`` beside no ``open_clip_config.json`` that
    is not JSON is refused by name (it was read as an open_clip name: "no open_clip_config.json")."""
    import json

    from imgalign.hub import looks_like_path

    if os.path.isdir(name):
        file: str | Path | None = Path(name) / "config.json"
    elif (
        name.count("/") == 1 and not looks_like_path(name) and not name.startswith(("hf-hub:", "local-dir:"))
    ):
        from huggingface_hub import try_to_load_from_cache

        try:
            file = try_to_load_from_cache(name, "config.json")
        except ValueError:  # not a valid repo id
            file = None
        file = file if isinstance(file, str) else None
    else:
        file = None
    if file is None or not Path(file).is_file():
        return None
    try:
        config = json.loads(Path(file).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        if (Path(file).parent / "open_clip_config.json").is_file():
            return None
        raise ValueError(
            f"{file} cannot be read as JSON ({e}): a damaged or hand-edited model config; restore the model's own"
        ) from None
    return config if isinstance(config, dict) else None


def transformers_clip_config(name: str) -> dict[str, Any] | None:
    """The ``config.json`` of a transformers CLIP (``model_type`` ``clip``) at `name`, a folder or a Hub id in the
    local cache; None for anything else (open_clip names, other models, ids not downloaded)."""
    config = transformers_config(name)
    return config if config is not None and config.get("model_type") == "clip" else None


def other_transformers_model(what: str, name: str) -> str | None:
    """The error line for `name` holding a transformers model other than a CLIPModel (a SigLIP, a CLIPVisionModel
    or CLIPTextModel alone, a DINOv2), which was read as an open_clip name ("no open_clip_config.json"); None when
    it holds none (an open_clip folder among them)."""
    if os.path.isdir(name) and (Path(name) / "open_clip_config.json").is_file():
        return None
    config = transformers_config(name)
    if config is None or config.get("model_type") == "clip":
        return None
    return (
        f"{what}: {name!r} holds a transformers {config.get('model_type')!r} model, not a CLIPModel (model_type "
        "'clip', both towers, e.g. openai/clip-vit-large-patch14); give such a folder or Hub id, or an open_clip "
        "model"
    )


class TransformersCLIP(torch.nn.Module):
    """A transformers ``CLIPModel`` behind the calls the reward makes of an open_clip model: ``encode_image`` on
    normalised pixels (B, 3, S, S) and ``encode_text`` on what :class:`TransformersCLIPTokens` returns, both the
    projected embeddings (B, D)."""

    def __init__(self, model: Any, preprocess: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.model = model
        # [0, 1] images (B, 3, H, W) -> the model's pixels: its image processor's steps
        self.preprocess = preprocess

    @staticmethod
    def _features(out: Any) -> torch.Tensor:
        # transformers 5 returns the projection as pooler_output of a model output; earlier versions the tensor
        return out if isinstance(out, torch.Tensor) else out.pooler_output

    def encode_image(self, pixels: torch.Tensor) -> torch.Tensor:
        return self._features(self.model.get_image_features(pixel_values=pixels))

    def encode_text(self, batch: Any) -> torch.Tensor:
        return self._features(
            self.model.get_text_features(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        )


class TransformersCLIPTokens:
    """A transformers CLIP tokenizer called as open_clip's: ``tokens(prompts)`` pads and cuts to the context
    length; ``encode`` and ``context_length`` say which prompts are cut (:func:`cut_prompts`)."""

    def __init__(self, tokenizer: Any, context_length: int) -> None:
        self.tokenizer, self.context_length = tokenizer, int(context_length)

    def encode(self, prompt: str) -> list[int]:
        return list(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])

    def __call__(self, prompts: list[str]) -> Any:
        return self.tokenizer(
            prompts, padding=True, truncation=True, max_length=self.context_length, return_tensors="pt"
        )


PROCESSOR_HINT = "a model saved without one takes processor=FOLDER_OR_HUB_ID (its base CLIP's)"
"""What :func:`load_transformers_clip` tells the user of a CLIP without a processor to do (the clip reward's)."""


def missing_processor(what: str, source: str, hint: str = PROCESSOR_HINT) -> str | None:
    """Why folder `source` gives `what` (a transformers CLIP) no processor, or None (a folder with one, or a Hub
    id): transformers' own text spoke of huggingface.co and of a local directory with the same name."""
    if os.path.isdir(source) and not any(
        (Path(source) / f).is_file() for f in ("preprocessor_config.json", "processor_config.json")
    ):
        return (
            f"cannot load the processor of {what}: folder {source!r} has none (no preprocessor_config.json or "
            f"processor_config.json); {hint}"
        )
    return None


def load_transformers_clip(
    name: str,
    device: torch.device,
    dtype: torch.dtype,
    processor: str | None = None,
    hint: str = PROCESSOR_HINT,
) -> tuple[Any, Any, int, tuple[float, ...], tuple[float, ...], tuple[str, str]]:
    """Load a transformers CLIP and its processor (from `processor` when given) with the libraries' own loaders;
    `hint` says how to give a processor where the model has none (callers without processor= say their way).
    Returns (a :class:`TransformersCLIP` whose ``preprocess`` does the image processor's resize, centre crop and
    normalisation, its :class:`TransformersCLIPTokens`, input size, mean, std, ("processor", "bicubic"))."""
    from transformers import AutoProcessor, CLIPModel

    from imgalign.hub import (
        cannot_load,
        check_weights,
        invalid_config,
        invalid_config_errors,
        weights_do_not_fit,
    )
    from imgalign.rewards.features import image_processor_transform, per_channel

    what = f"transformers CLIP {name!r}"
    if os.path.isdir(name):
        check_weights(what, name)
    try:
        model = CLIPModel.from_pretrained(name, dtype=dtype)
    except invalid_config_errors() as e:  # a traceback of "Class validation error" or of KeyError: 'NAME'
        raise ValueError(invalid_config(what, e)) from None
    except (OSError, ValueError) as e:
        raise ValueError(cannot_load(what, e, name, kind="CLIPModel")) from None
    except RuntimeError as e:  # a traceback of transformers' advice to pass ignore_mismatched_sizes
        raise ValueError(weights_do_not_fit(what, e)) from None
    source = processor or name
    missing = missing_processor(what, source, hint)
    if missing:
        raise ValueError(missing)
    try:
        proc = AutoProcessor.from_pretrained(source)
    except (OSError, ValueError, TypeError, AttributeError) as e:  # AttributeError: a JSON list
        raise ValueError(
            cannot_load(f"the processor of {what} from {source!r}", e, source) + f"; {hint}"
        ) from None
    image_proc, tokenizer = getattr(proc, "image_processor", None), getattr(proc, "tokenizer", None)
    if image_proc is None or tokenizer is None:
        raise ValueError(
            f"{what}: {source!r} holds no CLIP processor (an image processor and a tokenizer); give "
            "processor=FOLDER_OR_HUB_ID of its base CLIP"
        )
    context = min(int(model.config.text_config.max_position_embeddings), int(tokenizer.model_max_length))
    # with the image processor's own resize (of the shortest edge), centre crop and normalisation
    prep = image_processor_transform(image_proc, what, device, dtype)
    wrapped = TransformersCLIP(model, prep).to(device).eval().requires_grad_(False)
    side = int(model.config.vision_config.image_size)
    got = tuple(wrapped.preprocess(torch.zeros(1, 3, side, side, device=device, dtype=dtype)).shape[-2:])
    # (else each image failed when scored: "Input image size (48*48) doesn't match model (32*32)")
    if got != (side, side):
        raise ValueError(
            f"{what}: the processor from {source!r} makes {got[0]}x{got[1]} pixels and the model takes "
            f"{side}x{side}; give processor= of the CLIP these weights come from (its image size)"
        )
    mean, std = per_channel(image_proc, "image_mean", what), per_channel(image_proc, "image_std", what)
    return wrapped, TransformersCLIPTokens(tokenizer, context), side, mean, std, ("processor", "bicubic")


def load_clip(
    name: str,
    device: torch.device,
    dtype: torch.dtype,
    pretrained: str | None = None,
    processor: str | None = None,
) -> tuple[Any, Any, int, tuple[float, ...], tuple[float, ...], tuple[str, str]]:
    """A transformers CLIP (:func:`load_transformers_clip`) when `name` is one, else an open_clip model
    (:func:`load_open_clip`)."""
    if transformers_clip_config(name) is not None:
        if pretrained:
            raise ValueError(
                f"clip reward: {name!r} is a transformers CLIP, which takes no pretrained= (its weights are in its "
                "folder)"
            )
        return load_transformers_clip(name, device, dtype, processor)
    other = other_transformers_model("clip reward", name)
    if other:
        raise ValueError(other)
    if processor:
        raise ValueError(
            f"clip reward: processor= is for transformers CLIPs, and {name!r} is none (open_clip models bring their "
            "own preprocessing); drop processor="
        )
    return load_open_clip(name, device, dtype, pretrained)


def incomplete_config(model_name: str, error: KeyError | TypeError) -> str:
    """The error line for a ``local-dir:`` folder whose open_clip_config.json lacks a field open_clip reads: it said
    only "text_cfg" (a KeyError), or "bad options ['model']: CLIP.__init__() missing ... 'embed_dim'"."""
    why = f"no {error.args[0]!r}" if isinstance(error, KeyError) and error.args else str(error)
    return (
        f"cannot load open_clip model {model_name!r}: the model_cfg of its open_clip_config.json is incomplete "
        f"({why}); it needs embed_dim, vision_cfg and text_cfg, as open_clip writes them"
    )


def _quick_gelu(model_name: str, pretrained: str | None) -> bool:
    """Whether the pretrained weights were trained with QuickGELU (OpenAI's CLIP): open_clip only warns when the
    architecture's GELU and the tag disagree, and the embeddings are then off."""
    if not pretrained or model_name.startswith(("local-dir:", "hf-hub:")):
        return False
    from open_clip.pretrained import get_pretrained_cfg

    return bool(get_pretrained_cfg(model_name, pretrained).get("quick_gelu", False))


def _precision(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}.get(dtype, "fp32")


def _load_shapes_clip(device: torch.device, dtype: torch.dtype) -> tuple[Any, Any]:
    """The embedded shapes CLIP: through ``imgalign.shapes_models`` when it is installed, else straight from the
    asset folder with open_clip's ``local-dir:`` loader."""
    try:
        from imgalign.shapes_models import load_shapes_clip
    except ImportError:
        import open_clip

        from imgalign.hub import embedded_path

        path = f"local-dir:{embedded_path('shapes-clip')}"
        model = open_clip.create_model(path, device=device, precision=_precision(dtype))
        return model, open_clip.get_tokenizer(path)
    model, _preprocess, tokenizer = load_shapes_clip(device, dtype)
    return model, tokenizer


@register_reward(
    "clip", "CLIPScore 2.5*max(cos,0) with an open_clip or transformers CLIP (default: the shapes CLIP)"
)
class CLIPReward(Reward):
    name = "clip"
    description = (
        "CLIPScore w*max(cos,0), w=2.5 (Hessel et al.); model=shapes-clip|ARCH,pretrained=TAG|local-dir:|a "
        "transformers CLIP folder or Hub id"
    )

    def __init__(
        self,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        model: str = "shapes-clip",
        pretrained: str | None = None,
        processor: str | None = None,
        weight: float = CLIPSCORE_W,
        clamp: bool = True,
        batch_size: int = 64,
    ) -> None:
        super().__init__(device, dtype)
        if not float(weight) > 0:  # before the model loads
            raise ValueError(
                f"clip reward: weight must be > 0, got {weight} (it scales every score: 0 makes them all 0, a "
                "negative weight ranks the worst-matching image best)"
            )
        self.model, self.tokenizer, self.size, self.mean, self.std, self.how = load_clip(
            str(model), self.device, dtype, pretrained, processor
        )
        self.model_name, self.weight = str(model), float(weight)
        self.batch_size = int(check_at_least(batch_size, 1, "clip reward: batch_size"))
        self.clamp = as_bool(clamp, "clip reward: clamp")
        self._warned_cut = False

    @torch.no_grad()
    def embed(self, images: torch.Tensor, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Image and text embeddings (B, D) each."""
        from imgalign.rewards.features import clip_preprocess

        x = images.to(self.device, self.dtype)
        if isinstance(self.model, TransformersCLIP):
            x = self.model.preprocess(x)
        else:
            x = clip_preprocess(x, self.size, self.mean, self.std, *self.how)
        img = self.model.encode_image(x)
        cut = [] if self._warned_cut else cut_prompts(self.tokenizer, prompts)
        if cut:  # once per reward: the tokenizer cut them silently
            self._warned_cut = True
            log.warning(
                "clip (%s): prompts longer than its %d-token context are cut and scored by their start only, "
                "e.g. %r",
                self.model_name,
                self.tokenizer.context_length,
                # the whole prompt filled the terminal (a 300-token one: 1,700 characters)
                excerpt(prompts[cut[0]]),
            )
        txt = self.model.encode_text(self.tokenizer(prompts).to(self.device))
        return img, txt

    def score(
        self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]] | None
    ) -> RewardOutput:
        scores, details = [], []
        for i in range(0, images.shape[0], self.batch_size):
            img, txt = self.embed(images[i : i + self.batch_size], prompts[i : i + self.batch_size])
            s = clipscore(img, txt, self.weight, self.clamp)
            cos = torch.nn.functional.cosine_similarity(img.float(), txt.float(), dim=-1)
            scores.append(s.cpu())
            details += [{"cosine": float(c)} for c in cos.cpu()]
        return RewardOutput(torch.cat(scores).float(), details)

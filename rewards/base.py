"""The reward contract, the registry, and image conversion shared by every reward.

Contract: ``reward(images, prompts, metadata=None) -> RewardOutput`` where `images` is a float tensor [B, 3, H, W]
in [0, 1] or a list of PIL images, `prompts` a list of B strings and `metadata` an optional list of B dicts (GenEval
metadata for rewards that need it). ``RewardOutput.scores`` is always a float32 tensor [B] on the CPU; ``details``
is an optional list of B dicts. A reward reads `images` and does not change them in place (every reward of a run
scores the same batch: such a change is refused, naming the reward), nor the process's gradient mode or default
dtype (both are set back after each call). Each reward declares ``name``, ``higher_is_better``, ``differentiable`` and
``stateful``; stateful rewards implement ``update(...)`` (called by trainers with current samples),
``state_dict()`` and ``load_state_dict()`` so trainers can checkpoint them.

Users pick rewards by name (``build_reward("clip")``, ``"clip:model=ViT-B-32,pretrained=openai"``) or by a
``package.module:attr`` path (``module:attr`` for a single-file module; either on the import path) to their own
callable or class.
"""

from __future__ import annotations

import importlib
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import NoneType
from typing import Any

import numpy as np
import torch
from PIL import Image

from imgalign.config import import_user_module, split_top_level
from imgalign.plugins import call_plugin, refuse_taken_name

ImagesLike = torch.Tensor | Sequence[Image.Image]


@dataclass
class RewardOutput:
    scores: torch.Tensor  # [B] float32, CPU
    details: list[dict[str, Any]] | None = None


class Reward:
    """Base class. Subclasses implement :meth:`score` on a float tensor [B, 3, H, W] in [0, 1]."""

    name: str = "reward"
    description: str = ""
    higher_is_better: bool = True
    differentiable: bool = False
    stateful: bool = False
    needs_prompt: bool = True  # False for prompt-free rewards (fid, discriminator, artifact)

    def __init__(self, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> None:
        self.device = torch.device(device)
        self.dtype = dtype

    def __call__(
        self, images: ImagesLike, prompts: Sequence[str], metadata: Sequence[dict[str, Any]] | None = None
    ) -> RewardOutput:
        x = to_tensor(images)
        check_prompts_and_metadata(self.name, prompts, metadata, x.shape[0], self.needs_prompt)
        bad = ~torch.isfinite(x.flatten(1)).all(1)  # [B] a NaN/inf image is scored NaN, by every reward alike
        finite = x[~bad].detach()  # the range check reads values only (a differentiable reward's graph stays)
        if finite.numel() and (float(finite.min()) < -0.5 or float(finite.max()) > 1.5):
            raise ValueError(
                f"reward {self.name!r}: images must be in [0, 1], got values from {float(finite.min()):.3g} to "
                f"{float(finite.max()):.3g}; divide [0, 255] images by 255, map [-1, 1] images with (x + 1) / 2"
            )
        if len(prompts) != x.shape[0]:
            raise ValueError(f"reward {self.name!r}: got {x.shape[0]} images but {len(prompts)} prompts")
        if metadata is not None and len(metadata) != x.shape[0]:
            raise ValueError(
                f"reward {self.name!r}: got {x.shape[0]} images but {len(metadata)} metadata rows"
            )
        # a non-finite image is never shown to score(): a stateful or batch-level reward (fid's set, its group
        # mode) would take it in as an image; its row gets NaN
        keep = (~bad).nonzero().flatten().tolist()
        n = x.shape[0]
        if not keep:
            return RewardOutput(
                torch.full((n,), float("nan")), [{"error": "non-finite image"} for _ in range(n)]
            )
        sub = x if len(keep) == n else x[keep]
        # the caller's own batch (a float32 tensor): the trainer scores every reward, and saves its samples, from the
        # same tensor, so a reward that zeroed or normalised it in place changed what the others scored, silently
        version = sub._version if sub is images and not sub.is_inference() else None
        # a reward that switched gradients off or changed the default dtype did it for the whole process: the
        # trainer's loss then had no graph, and the error blamed the objective
        grad_mode, default_dtype = torch.is_grad_enabled(), torch.get_default_dtype()
        try:
            out = self.score(
                sub,
                [prompts[i] for i in keep],
                [metadata[i] for i in keep] if metadata is not None else None,
            )
        finally:
            torch.set_grad_enabled(grad_mode)
            torch.set_default_dtype(default_dtype)
        if version is not None and sub._version != version:
            raise ValueError(
                f"reward {self.name!r} changed the images it was given in place (an in-place operation such as "
                "images.mul_(...), images[...] = ... or images.clamp_(...)): every reward, and the saved samples, "
                "read the same batch; score a copy (images = images.clone()) in its own code"
            )
        if out is None:  # as_tensor(None) is a single NaN, which would read as a non-finite score
            raise ValueError(
                f"reward {self.name!r} returned nothing (None); it must return one score per image (a tensor, "
                "array or list of numbers) or a RewardOutput"
            )
        if not isinstance(out, RewardOutput):
            refuse_text(self.name, out)
            out = RewardOutput(scores=torch.as_tensor(out))
        elif not isinstance(out.scores, torch.Tensor):  # RewardOutput([0.1, 0.2]): a list of numbers
            refuse_text(self.name, out.scores)
            # complex ones are refused before the cast (it dropped their imaginary parts, or, of a list, raised
            # "float() argument must be ... not 'complex'")
            arr = np.asarray(out.scores)
            refuse_complex(self.name, arr)
            out.scores = torch.as_tensor(arr.astype(np.float32))
        refuse_complex(self.name, out.scores)
        shape = tuple(out.scores.shape)
        # float32 on the CPU for every reward (a differentiable one computing in float64 gave float64); [B, 1] or a
        # 0-d score of one image is [B]; a differentiable reward's graph is kept through the cast
        scores = out.scores if self.differentiable else out.scores.detach()
        out.scores = scores.to("cpu", torch.float32).reshape(-1)
        # one score per image: [B], [B, 1], or 0-d for one image ([2, 2] for 4 images was flattened and accepted)
        if out.scores.shape[0] != len(keep) or len(shape) > 2 or len(shape) == 2 and shape[1] != 1:
            raise ValueError(
                f"reward {self.name!r} returned {out.scores.shape[0]} scores (shape {shape}) for {len(keep)} "
                f"images: a reward returns one score per image, shape [{len(keep)}]"
            )
        # details are zipped with the images (score's rows, a rollouts file): a short list misaligned them silently
        if out.details is not None and len(out.details) != len(keep):
            raise ValueError(
                f"reward {self.name!r} returned {len(out.details)} details for {len(keep)} images: "
                "RewardOutput.details holds one dict per image, or None"
            )
        if len(keep) < n:  # scatter back; the non-finite rows are NaN
            full = torch.full((n,), float("nan"), dtype=out.scores.dtype, device=out.scores.device)
            full[keep] = out.scores
            details = None
            if out.details is not None:
                details = [{"error": "non-finite image"} for _ in range(n)]
                for i, d in zip(keep, out.details):
                    details[i] = d
            out = RewardOutput(full, details)
        return out

    def score(
        self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]] | None
    ) -> RewardOutput:  # pragma: no cover - abstract
        raise NotImplementedError(
            f"reward {self.name!r} ({type(self).__name__}) has no score(images, prompts, metadata) method: a Reward "
            "subclass must define one"
        )

    @classmethod
    def training_error(cls, options: Mapping[str, Any]) -> str | None:
        """Why no trainer can learn from this reward built with `options` (e.g. fid's mode=group, one value per
        batch), or None. The trainer asks before any model loads."""
        return None

    def check_metadata(self, metadata: Sequence[dict[str, Any]]) -> None:
        """Raise ValueError naming the prompt when a metadata row could never be scored (a class the judge cannot
        find). The trainer calls it on its prompt file's rows before any model loads; rewards that read no metadata
        accept every row."""

    # ---- stateful rewards -----------------------------------------------------------------------------------
    def update(
        self, images: ImagesLike, prompts: Sequence[str], metadata: Sequence[dict[str, Any]] | None = None
    ) -> dict[str, float]:
        """Learn from current samples (stateful rewards only); returns metrics to log."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(f"reward {self.name!r} keeps no state but was given {sorted(state)}")


def check_prompts_and_metadata(
    name: str, prompts: Any, metadata: Any, n: int, needs_prompt: bool = True
) -> None:
    """Refuse, naming reward `name`, prompts that are not a list of `n` strings and metadata that is one dict, not a
    list: a single prompt string was taken as a list of its characters (5 images and "a cat" were scored against
    'a', ' ', 'c', 'a', 't', silently), None or a number failed with "object of type 'int' has no len()", and one
    metadata dict with KeyError: 0."""
    if isinstance(prompts, (str, bytes)):
        raise ValueError(
            f"reward {name!r}: prompts is one string ({excerpt(str(prompts), 60)!r}), not a list of {n} prompts: "
            f"give one prompt per image, e.g. [prompt] * {n}"
        )
    if not (hasattr(prompts, "__len__") and hasattr(prompts, "__getitem__")):
        raise ValueError(
            f"reward {name!r}: prompts must be a list of {n} strings, one per image, got {type(prompts).__name__}"
            + (f" (a reward that reads no prompt takes [''] * {n})" if prompts is None else "")
        )
    for i, p in enumerate(prompts if needs_prompt else []):  # (a prompt-free reward reads none of them)
        if not isinstance(p, str):
            raise ValueError(
                f"reward {name!r}: prompt {i} is of type {type(p).__name__} ({p!r}), not a string; give one string "
                "per image ('' for none)"
            )
    if isinstance(metadata, Mapping):
        raise ValueError(
            f"reward {name!r}: metadata is one dict, not a list of {n}: give one dict per image, e.g. "
            f"[row] * {n}, or None"
        )
    # a string of n characters, or a list of prompts in its place, passed the length check and failed inside the
    # reward ("string indices must be integers")
    if metadata is None:
        return
    if isinstance(metadata, (str, bytes)) or not isinstance(metadata, Iterable):
        got: str | None = type(metadata).__name__
    else:
        got = next(
            (
                f"row {i} is {type(r).__name__}"
                for i, r in enumerate(metadata)
                if not isinstance(r, (Mapping, NoneType))
            ),
            None,
        )
    if got:
        raise ValueError(
            f"reward {name!r}: metadata must be a list of {n} dicts (a prompt's GenEval row), one per image, or "
            f"None; {got}"
        )


def to_tensor(images: ImagesLike) -> torch.Tensor:
    """PIL images (any mode, same size) -> float32 [B, 3, H, W] in [0, 1] on the CPU; a tensor batch [B, 3, H, W]
    -> float32 on its own device. An integer tensor (uint8 0-255) is refused: read as [0, 1], a dark one was scored
    as a black-and-white image."""
    if isinstance(images, Image.Image):  # was "'Image' object is not iterable"
        raise TypeError("got one PIL image, expected a list of them (or a tensor batch): give [image]")
    if isinstance(images, torch.Tensor):
        if images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"expected images as [B, 3, H, W], got shape {tuple(images.shape)}")
        if not images.is_floating_point() and images.dtype != torch.bool:
            raise ValueError(
                f"images are a {str(images.dtype).replace('torch.', '')} tensor: give float images in [0, 1] "
                "(a uint8 batch x as x.float() / 255)"
            )
        return images.float()
    arrs = []
    for i, im in enumerate(images):
        if not isinstance(im, Image.Image):
            raise TypeError(
                f"image {i} is of type {type(im).__name__}, expected a PIL image or a tensor batch"
            )
        arrs.append(np.asarray(pil_to_rgb(im), dtype=np.float32) / 255.0)
    if not arrs:
        raise ValueError("no images given")
    sizes = {a.shape for a in arrs}
    if len(sizes) > 1:
        raise ValueError(f"images in one batch must share a size, got {sorted(sizes)}")
    return torch.from_numpy(np.stack(arrs)).permute(0, 3, 1, 2).contiguous()


def pil_to_rgb(im: Image.Image) -> Image.Image:
    """Convert any PIL mode (L, LA, La, P, RGBA, RGBa, I;16, I, F, CMYK, LAB, HSV) to 8-bit RGB; transparency
    composited on black."""
    if im.mode == "RGB":
        return im
    if im.mode in ("I;16", "I;16B", "I;16L", "I"):
        a = np.asarray(im, dtype=np.float64)
        # 16-bit modes are always 0-65535 (a dark 16-bit image is not an 8-bit one); 32-bit "I" says nothing
        top = 65535.0 if im.mode.startswith("I;16") or a.max() > 255 else 255.0
        return Image.fromarray(np.clip(a / top * 255.0, 0, 255).astype(np.uint8)).convert("RGB")
    if im.mode == "F":
        a = np.asarray(im, dtype=np.float64)
        return Image.fromarray(
            np.clip(a * (255.0 if a.max() <= 1.0 else 1.0), 0, 255).astype(np.uint8)
        ).convert("RGB")
    # premultiplied alpha: the colour channels already are the image composited on black ("La" failed in PIL's
    # convert, "RGBa" was un-premultiplied and its transparency dropped)
    if im.mode == "La":
        return im.split()[0].convert("RGB")
    if im.mode == "RGBa":
        return Image.merge("RGB", im.split()[:3])
    if im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info):
        rgba = im.convert("RGBA")
        bg = Image.new("RGBA", rgba.size, (0, 0, 0, 255))
        return Image.alpha_composite(bg, rgba).convert("RGB")
    return im.convert("RGB")


def to_pil(images: torch.Tensor) -> list[Image.Image]:
    """[B, 3, H, W] in [0, 1] -> list of RGB PIL images."""
    arr = (
        (images.detach().float().clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
    )
    return [Image.fromarray(a) for a in arr]


def excerpt(text: str, width: int = 100) -> str:
    """`text` on one line (white space runs collapsed), cut to at most `width` characters with " ..." at the end,
    for naming a long prompt in a warning. It cuts at a word boundary where one falls in the second half of the
    cut; otherwise mid-word (``textwrap.shorten`` gave only "..." for a prompt without spaces: Chinese or Japanese
    text, or a long run of one word)."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    keep = max(width - 4, 1)  # room for " ..."
    space = flat.rfind(" ", 0, keep + 1)  # a word that ends right at the cut is kept whole
    return (flat[:space] if space >= keep // 2 else flat[:keep]) + " ..."


# ---- registry -----------------------------------------------------------------------------------------------
_REGISTRY: dict[str, tuple[Callable[..., Reward], str]] = {}


def register_reward(name: str, description: str) -> Callable[[Callable[..., Reward]], Callable[..., Reward]]:
    """Class/factory decorator: make a reward selectable by `name`. A name registered by another module is refused
    (:func:`imgalign.plugins.refuse_taken_name`); the same module registering it again replaces its own."""

    def deco(factory: Callable[..., Reward]) -> Callable[..., Reward]:
        if getattr(factory, "__module__", None) not in BUILTIN_MODULES:
            # the built-ins first, so a plug-in cannot take one of their names
            _import_builtin()
        old, described = _REGISTRY.get(name, (None, ""))
        refuse_taken_name("reward", name, old, factory, described)
        _REGISTRY[name] = (factory, description)
        return factory

    return deco


def did_you_mean(name: str, names: Sequence[str]) -> str:
    """``" (did you mean 'geneval'?)"`` when `name` is most likely a misspelling or another casing of one of `names`
    (``GenEval``, ``genval``, ``MODE``), else ``""``."""
    import difflib

    lowered = {n.lower(): n for n in names}
    close = difflib.get_close_matches(name.strip().lower(), list(lowered), n=1, cutoff=0.75)
    return f" (did you mean {lowered[close[0]]!r}?)" if close else ""


def unknown_reward(name: str) -> str:
    """The error for a reward name no reward is registered under: a close spelling (:func:`did_you_mean`) and the
    valid names."""
    known = sorted(list_rewards())
    return (
        f"unknown reward {name!r}{did_you_mean(name, known)}; valid rewards: {', '.join(known)} (or a "
        "'module:attr' path)"
    )


def list_rewards() -> dict[str, str]:
    """name -> one-line description of every registered reward."""
    _import_builtin()
    return {k: v[1] for k, v in sorted(_REGISTRY.items())}


def parse_reward_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``"clip:model=ViT-B-32,pretrained=openai"`` -> ("clip", {...}); values as :func:`_option_value` reads them.
    A ``module:attr`` path keeps its colon: options follow a second colon (``pkg.mod:Cls:key=value``). A module
    without a dot (``myrewards:brightness``, a single file) is a path when its attr is a name, not key=value, and
    the module is not a registered reward's name."""
    spec = spec.strip()
    name, opts = spec, ""
    if ":" in spec:
        head, rest = spec.split(":", 1)
        attr = rest.split(":", 1)[0]
        if rest and "=" not in attr and ("." in head or _is_single_file_path(head, attr)):  # module path
            attr, _, opts = rest.partition(":")
            name = f"{head.strip()}:{attr.strip()}"  # 'myrew: brightness' is myrew:brightness
        else:
            name, opts = head.strip(), rest
    kwargs: dict[str, Any] = {}
    for item in filter(None, (s.strip() for s in split_top_level(opts))):
        if "=" not in item:
            raise ValueError(f"reward option {item!r} in {spec!r} must look like key=value")
        k, v = item.split("=", 1)
        if not k.strip():  # was: "unknown option(s) ; its options: ...", the empty name invisible
            raise ValueError(f"reward option {item!r} in {spec!r} has no name before '='; write key=value")
        if k.strip() in kwargs:  # was: the last one silently
            raise ValueError(f"reward option {k.strip()!r} is given twice in {spec!r}; give it once")
        kwargs[k.strip()] = _option_value(v)
    return name, kwargs


def _is_single_file_path(module: str, attr: str) -> bool:
    """``myrewards:brightness``: a module without a dot and an identifier after the colon, when the module is
    not a registered reward (``clip:foo`` stays the registered reward with a malformed option)."""
    if not (module.strip().isidentifier() and attr.strip().isidentifier()):
        return False
    _import_builtin()
    return module.strip() not in _REGISTRY


def _option_value(text: str) -> Any:
    """A spec value: a number, a boolean (true/false), null or a list as YAML reads it; anything else the string
    as written (YAML would turn ``Question: what?`` into a mapping and ``no`` into False)."""
    import yaml

    v = text.strip()
    if not v:
        return ""
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":  # quoted: the text inside
        return v[1:-1]
    if re.fullmatch(r"[+-]?0\d+", v):  # leading zeros: an identifier, not a number
        return v
    if re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+", v):  # 1e-3 (YAML 1.1 reads it as a string)
        # 1e999 overflows to inf, 1e-400 to 0 (clip:weight=1e-400 was "must be > 0, got 0.0"): left as written,
        # as .inf is (a number option then refuses it by name)
        underflow = float(v) == 0 and re.search(r"[1-9]", re.split(r"[eE]", v)[0])
        return float(v) if math.isfinite(float(v)) and not underflow else v
    try:
        val = yaml.safe_load(v)
    except yaml.YAMLError:
        return v
    if isinstance(val, bool) and v.lower() not in ("true", "false"):
        return v
    if isinstance(val, float) and not math.isfinite(val):  # .nan, .inf: left as written
        return v
    if isinstance(val, (int, float)) and not isinstance(val, bool) and ":" in v:  # 16:9 (YAML 1.1 reads 969)
        return v
    if isinstance(val, (bool, int, float, list)) or val is None:
        return val
    return v


def as_bool(value: Any, option: str) -> bool:
    """A boolean reward option: True/False (or the strings true/false, 1/0); anything else is an error, not True."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"{option} must be true or false, got {value!r}")


def check_at_least(value: Any, minimum: float, option: str) -> Any:
    """A numeric reward option >= minimum, else a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= minimum:
        raise ValueError(f"{option} must be a number >= {minimum}, got {value!r}")
    return value


def build_reward(
    spec: str, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32, **kwargs: Any
) -> Reward:
    """Build a reward by registered name or ``pkg.module:attr`` (a Reward subclass, factory, or plain callable
    ``fn(images, prompts, metadata) -> scores``); options in the spec string or as keyword arguments."""
    _import_builtin()
    name, opts = parse_reward_spec(spec)
    opts.update(kwargs)
    if name in _REGISTRY:
        factory = _REGISTRY[name][0]
    elif ":" in name:
        mod_name, attr = name.split(":", 1)
        try:
            module = import_user_module(mod_name, f"reward {name!r}")
        except ValueError as e:
            if "." in mod_name or not isinstance(e.__cause__ or e.__context__, ModuleNotFoundError):
                raise
            # a dotless name that is no module may be a misspelt registered reward
            raise ValueError(f"{e} (nor a registered reward: {', '.join(sorted(_REGISTRY))})") from None
        try:
            factory = getattr(module, attr)
        except AttributeError as e:
            raise ValueError(f"cannot import reward {name!r}: {e}") from None
        if not (isinstance(factory, type) and issubclass(factory, Reward)):
            if not _is_factory(factory):  # fn(images, prompts, metadata) -> scores
                check_function_reward(name, factory, opts)
                return FunctionReward(factory, name=attr, **opts)
            # a factory fn(device=, dtype=, ...) -> Reward: called below
        elif not _takes_any_keyword(factory) and not {"device", "dtype"} <= set(_parameters(factory)):
            raise ValueError(
                f"reward {spec.strip()!r}: {factory.__name__} is a Reward subclass, and a Reward subclass must accept "
                "device and dtype (keyword arguments): def __init__(self, device='cpu', dtype=torch.float32, ...) "
                "calling super().__init__(device, dtype)"
            )
        # was a NotImplementedError traceback at the first score, in training
        elif factory.score is Reward.score:
            raise ValueError(
                f"reward {name!r}: {factory.__name__} is a Reward subclass without a score method: define "
                "score(self, images, prompts, metadata) returning one score per image (a RewardOutput or a tensor [B])"
            )
    else:
        parts = [x.strip() for x in name.split(",") if x.strip()]
        several = bool(parts) and "," in name and all(x in _REGISTRY for x in parts)  # 'clip,geneval'
        raise ValueError(
            unknown_reward(name)
            + (
                f"; for several rewards give each its own spec ({' '.join('--reward ' + x for x in parts)}, "
                "or one list entry each in a config)"
                if several
                else ""
            )
        )
    built = _call_factory(name, factory, device, dtype, opts)
    # a plug-in registered with @register_reward on a function that returns something else failed at its first score
    if not isinstance(built, Reward):
        got = f"a {type(built).__name__}, not a Reward"
        if name not in _REGISTRY:
            raise ValueError(
                f"reward {name!r} takes device/dtype, so it is called as a factory, but it returned {got}"
            )
        what = getattr(factory, "__qualname__", type(factory).__name__)
        raise ValueError(
            f"reward {name!r} is registered with {what}, which returned {got}; register a Reward subclass, or a "
            "function that takes device and dtype and returns a Reward"
        )
    return built


def _call_factory(
    name: str,
    factory: Callable[..., Any],
    device: str | torch.device,
    dtype: torch.dtype,
    opts: dict[str, Any],
) -> Any:
    """``factory(device=, dtype=, **opts)`` (a Reward subclass or a function taking device/dtype); an option it
    does not take is refused by name, with the options it has."""
    check_factory_options(name, factory, opts)
    try:
        # a plug-in's own KeyError or OSError printed as its text alone ("error: 'weights'"), naming no reward
        return call_plugin(f"reward {name!r}", name, factory, device=device, dtype=dtype, **opts)
    # the options' names were checked above: a TypeError comes from a value or from inside the reward, and "bad
    # options ['model']" blamed the model name for a processor file's 'float' object is not iterable
    except TypeError as e:
        given = ", ".join(f"{k}={v!r}" for k, v in opts.items()) or "no options"
        raise ValueError(f"reward {name!r} could not be built ({given}): TypeError: {e}") from None


def check_factory_options(name: str, factory: Callable[..., Any], opts: Mapping[str, Any]) -> None:
    """Refuse, by name and before anything loads, an option `factory` does not take, one given empty, a number
    option given as text, or a required option not given."""
    _refuse_unknown_options(name, opts, reward_options(factory), _takes_any_keyword(factory))
    _refuse_empty_values(name, opts, _parameters(factory))
    _refuse_non_numbers(name, opts, _parameters(factory))
    _refuse_unlisted_values(name, opts, factory)
    missing = [o for o in required_options(factory) if o not in opts]
    if missing:  # was Python's "missing 1 required positional argument: 'path'" after "bad options []"
        example = f"{name}:" + ",".join([f"{k}=..." for k in opts] + [f"{o}=VALUE" for o in missing])
        raise ValueError(
            f"reward {name!r} needs the option(s) {', '.join(missing)}: give them in the reward spec, e.g. "
            f"{example!r}"
        )


def check_reward_options(spec: str) -> None:
    """The options of registered reward `spec` checked as :func:`build_reward` checks them, without building it
    (``train --print-config`` and the checks before training). A ``module:attr`` reward is left to its build."""
    _import_builtin()
    name, opts = parse_reward_spec(spec)
    if name in _REGISTRY:
        check_factory_options(name, _REGISTRY[name][0], opts)


def _refuse_empty_values(name: str, opts: Mapping[str, Any], params: Mapping[str, Any]) -> None:
    """An option given with no value (``fid:ref=``: ``ref=$STATS`` with STATS unset) is refused by name, unless its
    default is empty too (``vlm_loglik:query=``). Read as a path, '' was the current folder: discriminator and fid
    ``ref=`` took every image under it as the reference set, silently, and ``head=`` said "head file '.' is a
    folder"; other options failed in another library's words (a Hub "Repo id must use alphanumeric chars")."""
    import inspect

    for key, value in opts.items():
        if not isinstance(value, str) or value.strip() or key not in params:
            continue
        default = params[key].default
        if default == "":
            continue
        leave = ""
        if default is not inspect.Parameter.empty:  # a required option cannot be left out
            leave = f", or leave {key}= out" + ("" if default is None else f" (default {default!r})")
        raise ValueError(
            f"reward {name!r}: option {key}= is empty (an unset shell variable?): give a value{leave}"
        )


def _beyond_float(value: Any) -> bool:
    """Whether `value` is the text of a number a float cannot hold: 1e400 (inf), or 1e-400 (0, written as not 0)."""
    if not isinstance(value, str) or not re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+", value):
        return False
    return math.isinf(float(value)) or (
        float(value) == 0 and bool(re.search(r"[1-9]", re.split(r"[eE]", value)[0]))
    )


def _refuse_non_numbers(name: str, opts: Mapping[str, Any], params: Mapping[str, Any]) -> None:
    """An option whose default is a number given as text (``clip:weight=abc``) or, for a whole-number default, as a
    fraction (``clip:batch_size=2.5``) is refused by name before the reward loads: ``float('abc')`` failed after the
    model loaded without naming the option, and ``int(2.5)`` silently made it 2."""
    for key, value in opts.items():
        default = params[key].default if key in params else None
        if isinstance(default, bool) or not isinstance(default, (int, float)):
            continue
        whole = isinstance(default, int)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or (whole and not float(value).is_integer()):
            hint = " (out of a float's range: about 5e-324 to 1.8e308 from 0)" if _beyond_float(value) else ""
            raise ValueError(
                f"reward {name!r}: option {key} must be {'a whole number' if whole else 'a number'} "
                f"(default {default}), got {value!r}{hint}"
            )


def _refuse_unknown_options(
    name: str, opts: Mapping[str, Any], options: Sequence[str], open_ended: bool
) -> None:
    """An option the reward does not take (and it takes no ``**kwargs``: ``open_ended``), refused by name."""
    unknown = sorted(set(opts) - set(options))
    if unknown and not open_ended:
        hint = did_you_mean(unknown[0], options) if len(unknown) == 1 else ""
        raise ValueError(
            f"reward {name!r}: unknown option(s) {', '.join(unknown)}{hint}; its options: "
            f"{', '.join(options) or 'none'}"
        )


def check_function_reward(name: str, fn: Any, opts: Mapping[str, Any]) -> None:
    """Refuse, when built, a ``module:attr`` that cannot score as ``fn(images, prompts, metadata, **opts)``: a
    class that is not a :class:`Reward` (and takes no device/dtype), something not callable, or options the
    function does not take (the scoring call would fail only after the model loaded)."""
    import inspect

    what = "subclass imgalign.rewards.Reward, or give a function fn(images, prompts, metadata) -> scores"
    if isinstance(fn, type):
        raise ValueError(
            f"reward {name!r} is a class but not an imgalign Reward (and takes no device/dtype, so it is no "
            f"factory either): {what}"
        )
    if not callable(fn):
        raise ValueError(f"reward {name!r} is of type {type(fn).__name__}, not callable: {what}")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # no inspectable signature (a builtin): nothing to check
        return
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    params = list(sig.parameters.values())
    taken = [p for p in params if p.kind in positional][:3]  # images, prompts, metadata
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    options = [p.name for p in params if p.kind in kinds and p not in taken]
    _refuse_unknown_options(name, opts, options, _takes_any_keyword(fn))
    try:
        sig.bind(None, None, None, **opts)
    except TypeError as e:
        raise ValueError(
            f"reward {name!r} cannot be called as fn(images, prompts, metadata"
            f"{''.join(f', {k}=...' for k in opts)}): {e}"
        ) from None


def _is_factory(fn: Callable[..., Any]) -> bool:
    """A callable taking ``device`` or ``dtype`` builds a Reward; one without them scores images itself."""
    import inspect

    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "device" in params or "dtype" in params


def reward_key(spec: str) -> str:
    """One name per reward and options, whatever way `spec` writes them: ``name`` plus its options sorted, without
    those equal to the reward's default (``geneval``, ``geneval:mode=partial`` and ``geneval: mode=partial`` are all
    ``geneval``; ``geneval:mode=strict`` stays). A ``module:attr`` reward's defaults are read from its signature
    (importing the module; one that does not import keeps every option). Values as :func:`_key_text` writes them:
    ``weight=3.0`` is ``weight=3``, and the string ``'1'`` is ``"1"``, not the number 1. A value naming an existing
    folder ends without a slash (``DIR/`` is ``DIR``); paths are not made absolute."""
    _import_builtin()
    name, opts = parse_reward_spec(spec)
    params = _parameters(reward_target(name)) if opts else {}
    opts = {k: v for k, v in opts.items() if not (k in params and _same_default(params[k].default, v))}
    if not opts:
        return name
    # a folder as the user wrote it, without the trailing slash a shell's completion adds (model=DIR/ is model=DIR):
    # a score file's columns keyed by one spelling did not pair with a --baseline's keyed by the other
    opts = {k: _without_trailing_slash(v) for k, v in opts.items()}
    return f"{name}:{','.join(f'{k}={_key_text(v)}' for k, v in sorted(opts.items()))}"


def _without_trailing_slash(value: Any) -> Any:
    """`value` without trailing slashes when it is a string naming an existing folder (``DIR/`` -> ``DIR``; ``/``
    stays), else as it is."""
    if isinstance(value, str) and value.endswith(("/", os.sep)) and len(value) > 1 and Path(value).is_dir():
        return value.rstrip("/" + os.sep) or value
    return value


def same_reward_key(spec: str) -> str:
    """:func:`reward_key` with every option that names an existing file or folder given as its resolved path, so
    that one head file named two ways (``head=o/d.safetensors``, ``head=./o/d.safetensors``) is one reward."""
    name, opts = parse_reward_spec(spec)
    if not opts:
        return reward_key(spec)
    files = {
        k: str(Path(v).resolve()) for k, v in opts.items() if isinstance(v, str) and v and Path(v).exists()
    }
    if not files:
        return reward_key(spec)
    opts = {**opts, **files}
    return reward_key(f"{name}:{','.join(f'{k}={_key_text(v)}' for k, v in opts.items())}")


def reward_target(name: str) -> Any:
    """The registered factory, or the ``module:attr`` object, a reward name stands for; None when it has none."""
    if name in _REGISTRY:
        return _REGISTRY[name][0]
    if ":" not in name:
        return None
    mod_name, attr = name.split(":", 1)
    try:
        return getattr(importlib.import_module(mod_name), attr, None)
    except Exception:  # noqa: BLE001 - build_reward reports a module that does not import
        return None


def _same_default(default: Any, value: Any) -> bool:
    import inspect

    return default is not inspect.Parameter.empty and _key_text(default) == _key_text(value)


def _key_text(v: Any) -> str:
    """A reward option's value in a key, so that a spec reading back the same value gets the same text: numbers by
    value (``3.0`` and ``3`` are ``3``), true/false/null, lists element by element, and a string as written unless
    it would read back as something else (a number, a boolean, text with a comma), which is quoted."""
    if v is True or v is False:
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        return str(int(v))
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return f"[{','.join(_key_text(x) for x in v)}]"
    if isinstance(v, str):
        back = _option_value(v)
        return v if "," not in v and isinstance(back, str) and back == v else f'"{v}"'
    return str(v)


def _refuse_unlisted_values(name: str, opts: Mapping[str, Any], factory: Callable[..., Any]) -> None:
    """An option annotated with a ``Literal`` of choices (geneval's ``mode``) given another value is refused by name
    before anything loads: ``train --print-config`` showed ``geneval:mode=bogus`` as fine (the reward refused it
    only when built)."""
    import typing

    try:
        hints = typing.get_type_hints(factory.__init__ if isinstance(factory, type) else factory)
    except Exception:  # noqa: BLE001 - a plug-in's annotations that do not resolve: left to its build
        return
    for key, value in opts.items():
        hint = hints.get(key)
        choices = typing.get_args(hint) if typing.get_origin(hint) is typing.Literal else ()
        if choices and value not in choices:
            raise ValueError(
                f"reward {name!r}: option {key}={value!r} is not one of {', '.join(map(str, choices))}"
            )


def _parameters(factory: Callable[..., Any]) -> Mapping[str, Any]:
    """A reward factory's signature parameters by name (empty when it has no inspectable signature)."""
    import inspect

    try:
        return inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return {}


def reward_options(factory: Callable[..., Any]) -> list[str]:
    """The options a reward factory takes by name (``device`` and ``dtype`` are set by the caller)."""
    import inspect

    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    params = _parameters(factory).values()
    return [p.name for p in params if p.kind in kinds and p.name not in ("self", "device", "dtype")]


def required_options(factory: Callable[..., Any]) -> list[str]:
    """The options of :func:`reward_options` that have no default (the factory cannot be built without them)."""
    import inspect

    params = _parameters(factory)
    return [o for o in reward_options(factory) if params[o].default is inspect.Parameter.empty]


def _takes_any_keyword(factory: Callable[..., Any]) -> bool:
    import inspect

    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


class FunctionReward(Reward):
    """Wraps a plain callable ``fn(images, prompts, metadata) -> scores``. A function that reads no prompt says so
    with the attribute ``fn.needs_prompt = False`` (as Reward classes declare it), so `imgalign score` scores images
    that have none."""

    def __init__(self, fn: Callable[..., Any], name: str = "function", **opts: Any) -> None:
        super().__init__()
        self.fn, self.name, self.opts = fn, name, opts
        self.needs_prompt = bool(getattr(fn, "needs_prompt", True))

    def score(
        self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]] | None
    ) -> RewardOutput:
        out = self.fn(images, prompts, metadata, **self.opts)
        if out is None or isinstance(out, RewardOutput):  # None: Reward.__call__ says it returned nothing
            return out
        refuse_complex(self.name, out)
        refuse_text(self.name, out)
        if isinstance(out, torch.Tensor):  # on any device, with a graph or not (numpy takes neither)
            return RewardOutput(scores=out.detach().to("cpu", torch.float32))
        try:
            return RewardOutput(scores=torch.as_tensor(np.asarray(out, dtype=np.float32)))
        except (TypeError, ValueError) as e:
            raise ValueError(
                f"reward {self.name!r} returned a {type(out).__name__} that is not one number per image ({e}); "
                "it must return a tensor, array or list of B numbers, or a RewardOutput"
            ) from None


def _first_text(scores: Any) -> str | bytes | None:
    """The first text element of a (nested) list, tuple or array, or None."""
    if isinstance(scores, (str, bytes)):
        return scores
    if isinstance(scores, np.ndarray):
        scores = scores.ravel().tolist() if scores.dtype.kind in "USO" else []
    if isinstance(scores, (list, tuple)):
        return next((t for t in map(_first_text, scores) if t is not None), None)
    return None


def refuse_text(name: str, scores: Any) -> None:
    """Refuse a reward's scores given as text: numpy's cast read ``["0.5", "1"]`` (a plug-in returning formatted
    numbers) as 0.5 and 1.0 without a word, while a score must be a number."""
    text = _first_text(scores)
    if text is not None:
        raise ValueError(
            f"reward {name!r} returned text ({text!r}) among its scores; it must return numbers, one per image "
            "(float(text) where the text is a number)"
        )


def refuse_complex(name: str, scores: Any) -> None:
    """Refuse a reward's complex scores (a tensor or array): the cast to float32 kept their real parts without a
    word, so 1+5j was scored, and trained on, as 1.0."""
    if (isinstance(scores, torch.Tensor) and scores.is_complex()) or (
        isinstance(scores, np.ndarray) and np.iscomplexobj(scores)
    ):
        raise ValueError(
            f"reward {name!r} returned complex scores ({scores.dtype}); it must return real numbers, one per image"
        )


BUILTIN_MODULES = [
    "imgalign.rewards.geneval",
    "imgalign.rewards.clip",
    "imgalign.rewards.vlm",
    "imgalign.rewards.discriminator",
    "imgalign.rewards.artifact",
    "imgalign.rewards.fid",
]


def _import_builtin() -> None:
    for m in BUILTIN_MODULES:
        importlib.import_module(m)

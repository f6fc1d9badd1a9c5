"""Frozen image feature encoders shared by the discriminator, artifact and FID rewards.

Every encoder maps a float batch [B, 3, H, W] in [0, 1] to float32 features [B, D] on the CPU, under no_grad.
Names (a string, so they fit in a reward spec such as ``discriminator:features=shapes-clip``):

=======================================  ===============================================================
name                                     what
=======================================  ===============================================================
``shapes-clip``                          image tower of the embedded shapes CLIP
``open_clip:ARCH@TAG``                   an open_clip architecture with a pretrained tag (cached weights)
``open_clip:ARCH@/path/ckpt``            an open_clip architecture with a local checkpoint file
``open_clip:local-dir:/path``            an open_clip folder (open_clip_config.json + weights)
``dinov2:PATH_OR_ID``                    a DINOv2 (or DINOv3, DINO ViT) model through transformers (CLS token)
``clip:PATH_OR_ID``                      a transformers CLIP's projected image embedding (e.g. openai/clip-vit-
                                         large-patch14), through its own image processor
``stats``                                parameter-free image statistics (colour / saturation / gradient
                                         histograms, Laplacian and Fourier band energies); no weights
=======================================  ===============================================================
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F


class FeatureEncoder:
    """A frozen image encoder: ``enc(images [B,3,H,W] in [0,1]) -> [B, D]`` float32 on the CPU; encoders with
    ``tokens_fn`` (DINOv2) also give ``enc.tokens(images) -> [B, 1 + P, D]`` (CLS first, then patch tokens)."""

    def __init__(
        self,
        name: str,
        fn: Callable[[torch.Tensor], torch.Tensor],
        dim: int,
        device: torch.device,
        dtype: torch.dtype,
        tokens_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        self.name, self.fn, self.dim, self.device, self.dtype = name, fn, dim, device, dtype
        self.tokens_fn = tokens_fn

    @property
    def has_tokens(self) -> bool:
        return self.tokens_fn is not None

    @torch.no_grad()
    def tokens(self, images: torch.Tensor, batch_size: int = 64) -> torch.Tensor:
        if self.tokens_fn is None:
            raise ValueError(
                f"feature encoder {self.name!r} gives no patch tokens; use a dinov2:PATH encoder"
            )
        outs = [
            self.tokens_fn(images[i : i + batch_size].to(self.device, self.dtype)).float().cpu()
            for i in range(0, images.shape[0], batch_size)
        ]
        return torch.cat(outs)

    @torch.no_grad()
    def __call__(self, images: torch.Tensor, batch_size: int = 64) -> torch.Tensor:
        outs = []
        for i in range(0, images.shape[0], batch_size):
            x = images[i : i + batch_size].to(self.device, self.dtype)
            outs.append(self.fn(x).float().cpu())
        return torch.cat(outs) if outs else torch.zeros(0, self.dim)


# (name, device, dtype) -> (what its files were when built: files_stamp, the encoder)
_CACHE: dict[tuple[str, str, str], tuple[tuple, FeatureEncoder]] = {}


def local_name(name: str) -> str:
    """Encoder `name` with its local folder or checkpoint file made absolute (``dinov2:PATH``, ``clip:PATH``,
    ``open_clip:local-dir:PATH``, ``open_clip:PATH``, ``open_clip:ARCH@PATH``), so that a head or a stats file that
    records it finds the encoder from any working folder: a relative ``dinov2:models/dino`` was read elsewhere as a
    Hub id ("not in the local Hub cache"). Any other name, or a path that does not exist here, is returned as is."""
    kind, path = split_encoder_name(name)
    if not kind or not path or not os.path.exists(path):
        return name
    return f"{kind}{os.path.abspath(path)}"


def split_encoder_name(name: str) -> tuple[str, str]:
    """(kind, the folder, file or Hub id it names) of an encoder name: ``dinov2:PATH`` -> ("dinov2:", PATH),
    ``open_clip:ARCH@PATH`` -> ("open_clip:ARCH@", PATH); ("", name) for a name without a kind (shapes-clip)."""
    prefixes = ("dinov2:", "clip:", "open_clip:local-dir:", "open_clip:")
    prefix = next((p for p in prefixes if name.startswith(p)), None)
    if prefix is None:
        return "", name
    rest = name[len(prefix) :]
    arch, at, path = rest.partition("@") if prefix == "open_clip:" and "@" in rest else ("", "", rest)
    return f"{prefix}{arch}{at}", path


def names_an_encoder(name: str) -> bool:
    """Whether `name` is of a form :func:`build_features` builds (``stats``, ``shapes-clip``, or a kind prefix with
    its folder, file or Hub id); whether that model exists is not checked."""
    return name in ("stats", "shapes-clip") or all(split_encoder_name(name))


def moved_encoder(recorded: str, given: str) -> bool:
    """Whether encoder `given` may stand in for `recorded`, the one a head or a stats file was made with: `recorded`
    names a local folder or file (recorded absolute) that is no longer there -- moved, or the head copied to another
    machine -- and `given` is of the same kind and exists. It could not be re-pointed: the other name was refused as
    "fitted on other features", and the recorded one no longer loaded."""
    (kind, path), (new_kind, new_path) = split_encoder_name(recorded), split_encoder_name(given)
    return bool(
        kind
        and kind == new_kind
        and os.path.isabs(path)
        and not os.path.exists(path)
        and os.path.exists(new_path)
    )


def recorded_encoder_gone(recorded: str, what: str, option: str) -> str:
    """The advice for `what` (a head or a stats file) whose `recorded` encoder folder is no longer there, or ""."""
    kind, path = split_encoder_name(recorded)
    if not kind or not os.path.isabs(path) or os.path.exists(path):
        return ""
    return (
        f"{what} was made with features {recorded!r}, whose {path!r} is no longer there: if that encoder moved, "
        f"give its new place as {option}={kind}NEW_PATH"
    )


def build_features(
    name: str, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> FeatureEncoder:
    """Build (and cache per process) the feature encoder called `name`; see the module docstring. One whose local
    folder or file changed since it was built (exported again between two calls in one notebook) is built anew:
    the cache served the old weights."""
    device, name = torch.device(device), local_name(name)
    key, stamp = (name, str(device), str(dtype)), files_stamp(name)
    if key not in _CACHE or _CACHE[key][0] != stamp:
        _CACHE[key] = (stamp, _build(name, device, dtype))
    return _CACHE[key][1]


def files_stamp(name: str) -> tuple:
    """What the local folder or file of encoder `name` holds now: (file name, size, modification time) of each of
    its files (a folder's, not below it: the weights and configs the loaders read); () for a Hub id, a built-in
    name or a path that is not there."""
    kind, path = split_encoder_name(name)
    if not kind or not path or not os.path.exists(path):
        return ()
    files = sorted(Path(path).iterdir()) if os.path.isdir(path) else [Path(path)]
    return tuple((f.name, st.st_size, st.st_mtime_ns) for f in files if f.is_file() and (st := f.stat()))


def _build(name: str, device: torch.device, dtype: torch.dtype) -> FeatureEncoder:
    if name == "stats":
        return FeatureEncoder("stats", image_stats, STATS_DIM, device, torch.float32)
    if name == "shapes-clip" or name.startswith("open_clip:"):
        from imgalign.rewards.clip import load_open_clip

        model, _tok, size, mean, std, how = load_open_clip(name, device, dtype)

        def clip_fn(x: torch.Tensor) -> torch.Tensor:
            return model.encode_image(clip_preprocess(x, size, mean, std, *how))

        dim = int(clip_fn(torch.zeros(1, 3, size, size, device=device, dtype=dtype)).shape[-1])
        return FeatureEncoder(name, clip_fn, dim, device, dtype)
    if name.startswith("dinov2:"):
        return _dinov2(name.split(":", 1)[1], device, dtype)
    if name.startswith("clip:"):
        return _transformers_clip(name.split(":", 1)[1], device, dtype)
    raise ValueError(
        f"unknown feature encoder {name!r}; valid: stats, shapes-clip, open_clip:ARCH[@TAG|@CKPT], "
        "open_clip:local-dir:PATH, dinov2:PATH_OR_ID, clip:PATH_OR_ID (a transformers CLIP)"
    )


def _transformers_clip(path: str, device: torch.device, dtype: torch.dtype) -> FeatureEncoder:
    """``clip:PATH_OR_ID``: a transformers CLIP's projected image embedding (B, projection_dim)."""
    from imgalign.rewards.clip import (
        load_transformers_clip,
        other_transformers_model,
        transformers_clip_config,
    )

    what = f"feature encoder 'clip:{path}'"
    if transformers_clip_config(path) is None:
        raise ValueError(
            other_transformers_model(what, path)
            or f"{what}: {path!r} is no transformers CLIP (a folder or a Hub id in the local cache whose config.json "
            "has model_type 'clip'); for an open_clip model use open_clip:NAME"
        )
    # this encoder takes no processor=: the one the clip reward's error names
    hint = (
        "this encoder takes no processor=: save its base CLIP's processor into the folder "
        "(CLIPProcessor.from_pretrained(BASE).save_pretrained(FOLDER))"
    )
    model, *_ = load_transformers_clip(path, device, dtype, hint=hint)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return model.encode_image(model.preprocess(x))

    dim = int(model.model.config.projection_dim)
    return FeatureEncoder(f"clip:{path}", fn, dim, device, dtype)


def resize(x: torch.Tensor, hw: tuple[int, int], mode: str = "bicubic") -> torch.Tensor:
    """``F.interpolate`` of (B, C, H, W) to `hw` (antialiased unless ``nearest``), in float32 for half-precision
    images: torch's antialiased kernels on the CPU raised NotImplementedError "compute_index_ranges_weights" for
    bfloat16 and float16, so a reward or encoder run in those dtypes failed on any image not of its input size."""
    if mode == "nearest":
        return F.interpolate(x, size=hw, mode=mode)
    half = x.dtype in (torch.float16, torch.bfloat16)
    out = F.interpolate(x.float() if half else x, size=hw, mode=mode, align_corners=False, antialias=True)
    return out.to(x.dtype)


def clip_preprocess(
    x: torch.Tensor,
    size: int,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    resize_mode: str = "shortest",
    interpolation: str = "bicubic",
) -> torch.Tensor:
    """Tensor version of open_clip's eval transform on [0, 1] images (B, 3, H, W) -> (B, 3, size,
    size), normalised. ``resize_mode`` as open_clip's: 'shortest' (resize the shortest edge to `size`, then
    centre-crop), 'longest' (resize the longest edge to `size`, centre-pad with 0) or 'squash'
    (resize to size x size). Works on batches without a PIL round trip, so rewards on generated tensors stay on
    their device."""
    mode = interpolation if interpolation in ("bicubic", "bilinear", "nearest") else "bicubic"

    def resized(t: torch.Tensor, hw: tuple[int, int]) -> torch.Tensor:
        return t if tuple(t.shape[-2:]) == hw else resize(t, hw, mode)

    h, w = int(x.shape[-2]), int(x.shape[-1])
    if resize_mode == "squash":
        x = resized(x, (size, size))
    elif resize_mode == "longest":
        scale = size / max(h, w)
        nh, nw = max(1, round(h * scale)), max(1, round(w * scale))
        x = resized(x, (nh, nw))
        top, left = (size - nh) // 2, (size - nw) // 2
        x = F.pad(x, (left, size - nw - left, top, size - nh - top))
    else:  # shortest edge, then centre crop (torchvision's Resize(int) and CenterCrop arithmetic)
        nh, nw = (size, int(size * w / h)) if h <= w else (int(size * h / w), size)
        x = resized(x, (nh, nw))
        top, left = int(round((nh - size) / 2.0)), int(round((nw - size) / 2.0))
        x = x[..., top : top + size, left : left + size]
    m = torch.tensor(mean, device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
    s = torch.tensor(std, device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
    return (x.clamp(0, 1) - m) / s


def processor_geometry(
    x: torch.Tensor,
    shortest_edge: int | None,
    resize_hw: tuple[int, int] | None,
    crop_hw: tuple[int, int] | None,
    mode: str = "bicubic",
) -> torch.Tensor:
    """transformers' image-processor resize and centre crop on (B, 3, H, W) images, as its torchvision backend does:
    the shortest edge to ``shortest_edge`` keeping the aspect (the long edge ``int(s * long / short)``), or to
    ``resize_hw`` exactly (with interpolation `mode`); then, unless ``crop_hw`` is None, a centre crop at
    ``int((H - h) / 2)``, ``int((W - w) / 2)`` (zero-padded first where the crop is larger)."""
    h, w = int(x.shape[-2]), int(x.shape[-1])
    if shortest_edge is not None:
        s = int(shortest_edge)
        hw = (s, int(s * w / h)) if h <= w else (int(s * h / w), s)
    else:
        assert resize_hw is not None, "give shortest_edge or resize_hw"
        hw = (int(resize_hw[0]), int(resize_hw[1]))
    if hw != (h, w):
        x = resize(x, hw, mode)
    if crop_hw is None:
        return x
    ch, cw = int(crop_hw[0]), int(crop_hw[1])
    h, w = hw
    if ch > h or cw > w:
        ph, pw = max(ch - h, 0), max(cw - w, 0)
        x = F.pad(x, (pw // 2, (pw + 1) // 2, ph // 2, (ph + 1) // 2))
        h, w = int(x.shape[-2]), int(x.shape[-1])
    top, left = int((h - ch) / 2.0), int((w - cw) / 2.0)
    return x[..., top : top + ch, left : left + cw]


def _size_field(size: Any, key: str) -> int | None:
    """One field of a processor's size or crop_size (a dict, or transformers' SizeDict), None when unset."""
    v = size.get(key) if isinstance(size, dict) else getattr(size, key, None)
    return int(v) if v else None


def _height_width(size: Any, problem: str) -> tuple[int, int]:
    """(height, width) of a processor's size or crop_size; raises `problem` when either is unset."""
    h, w = _size_field(size, "height"), _size_field(size, "width")
    if h is None or w is None:
        raise ValueError(f"{problem}; set them in its preprocessor_config.json")
    return h, w


def per_channel(proc: Any, key: str, label: str) -> tuple[float, float, float]:
    """An image processor's `key` (image_mean, image_std) for the three channels: transformers takes one number
    for all three too (it raised "'int' object is not iterable", reported as a bad reward option)."""
    value = getattr(proc, key, None)
    # a hand-edited "0.5": one number; "123" was read character by character as (1, 2, 3)
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        values: tuple[float, ...] = (float(value),) * 3
    else:
        try:
            values = tuple(float(v) for v in value)
        except (TypeError, ValueError):
            values = ()
        if len(values) == 1:
            values *= 3
        if len(values) != 3:
            raise ValueError(f"{label}: its image processor's {key} {value!r} is not one number or three")
    # a NaN (a hand-edited "nan") or a zero std made every image's features NaN or inf
    if not all(math.isfinite(v) for v in values) or (key == "image_std" and min(values) <= 0):
        what = "finite numbers above 0" if key == "image_std" else "finite numbers"
        raise ValueError(f"{label}: its image processor's {key} {value!r} must be {what}")
    return values  # type: ignore[return-value]


def image_processor_transform(
    proc: Any, label: str, device: torch.device | str, dtype: torch.dtype
) -> Callable[[torch.Tensor], torch.Tensor]:
    """A transformers image processor's resize, centre crop, rescale and normalisation (:func:`processor_geometry`)
    as a function of [0, 1] images (B, 3, H, W), each step only where its ``do_resize``, ``do_center_crop``,
    ``do_rescale`` (by ``rescale_factor``, of 0-255 pixels) and ``do_normalize`` flag is on, as the processor does;
    `label` names the model in the error for a processor without sizes."""
    do_resize = bool(getattr(proc, "do_resize", True))
    size = getattr(proc, "size", None) or {}
    shortest = _size_field(size, "shortest_edge") if do_resize else None
    resize_hw = None
    if shortest is None and do_resize:
        resize_hw = _height_width(
            size,
            f"{label}: its image processor's size {size} has neither 'shortest_edge' nor 'height' and 'width'",
        )
    crop_hw = None
    if getattr(proc, "do_center_crop", True):  # DINOv2: shortest edge 256, then crop 224
        crop = getattr(proc, "crop_size", None) or {}
        crop_hw = _height_width(
            crop,
            f"{label}: its image processor centre-crops but its crop_size {crop} lacks 'height' or 'width'",
        )
    mean, std = (0.0,) * 3, (1.0,) * 3
    if getattr(proc, "do_normalize", True):
        mean, std = per_channel(proc, "image_mean", label), per_channel(proc, "image_std", label)
    m = torch.tensor(mean, device=device, dtype=dtype).view(1, 3, 1, 1)
    s = torch.tensor(std, device=device, dtype=dtype).view(1, 3, 1, 1)
    # the model's pixel units: 0-255 pixels times rescale_factor (1/255 gives [0, 1]), or 0-255 without a rescale
    factor = getattr(proc, "rescale_factor", 1 / 255) if getattr(proc, "do_rescale", True) else 1.0
    # a hand-edited null (a TypeError at the first image) or 0 (every pixel black)
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor < math.inf:
        raise ValueError(f"{label}: its image processor's rescale_factor {factor!r} is not a number > 0")
    scale = 255.0 * float(factor)
    # PIL's resample codes; a DINO v1 (vit) processor resamples bilinear, and its pixels were bicubic's, up to 0.25
    # away in normalised units. Lanczos, box and Hamming have no torch kernel: bicubic is the nearest.
    resample = getattr(proc, "resample", None)
    mode = "bicubic" if resample is None else {0: "nearest", 2: "bilinear"}.get(int(resample), "bicubic")

    def prep(x: torch.Tensor) -> torch.Tensor:
        hw = resize_hw if do_resize else (int(x.shape[-2]), int(x.shape[-1]))  # do_resize off: crop only
        x = processor_geometry(x, shortest, hw, crop_hw, mode).clamp(0, 1)
        return ((x * scale if scale != 1.0 else x) - m) / s

    return prep


DINO_TYPES = ("dinov2", "dinov2_with_registers", "dinov3_vit", "vit")
"""transformers model types a ``dinov2:`` encoder takes: ViTs whose last hidden state is [CLS, registers, patches]
(DINO v1 checkpoints are ``vit``)."""


def _dinov2(path: str, device: torch.device, dtype: torch.dtype) -> FeatureEncoder:
    from transformers import AutoConfig, AutoImageProcessor, AutoModel

    from imgalign.hub import (
        cannot_load,
        check_weights,
        invalid_config,
        invalid_config_errors,
        weights_do_not_fit,
    )

    what = f"feature encoder 'dinov2:{path}'"
    check_weights(what, path)
    try:  # transformers' own text spoke of internet connections, or of a model_type key, naming no encoder
        kind = AutoConfig.from_pretrained(path).model_type
        if kind in DINO_TYPES:
            model = AutoModel.from_pretrained(path, dtype=dtype).to(device).eval()
            proc = AutoImageProcessor.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise ValueError(cannot_load(what, e, path, kind="DINOv2")) from None
    except RuntimeError as e:  # a traceback of transformers' advice to pass ignore_mismatched_sizes
        raise ValueError(weights_do_not_fit(what, e)) from None
    except invalid_config_errors() as e:  # a traceback of KeyError: 'NAME' (an unknown hidden_act)
        raise ValueError(invalid_config(what, e)) from None
    # a CLIP or a VLM failed with a traceback; a detector's first query passed for a CLS
    if kind not in DINO_TYPES:
        raise ValueError(
            f"{what}: {path!r} holds a {kind!r} model, not a DINOv2-style image encoder (model types "
            f"{', '.join(DINO_TYPES)}); give such a folder or Hub id, e.g. facebook/dinov2-base"
        )
    prep = image_processor_transform(proc, f"dinov2:{path}", device, dtype)

    n_reg = int(getattr(model.config, "num_register_tokens", 0) or 0)

    def tokens_fn(x: torch.Tensor) -> torch.Tensor:
        h = model(pixel_values=prep(x)).last_hidden_state  # (B, 1 + R + P, D)
        return torch.cat([h[:, :1], h[:, 1 + n_reg :]], 1)  # CLS then patch tokens, registers dropped

    def fn(x: torch.Tensor) -> torch.Tensor:
        return model(pixel_values=prep(x)).last_hidden_state[:, 0]  # CLS (B, D)

    dim = int(model.config.hidden_size)
    return FeatureEncoder(f"dinov2:{path}", fn, dim, device, dtype, tokens_fn)


# ---- parameter-free statistics ------------------------------------------------------------------------------
_HIST_BINS = 8
_FFT_BANDS = 6
STATS_DIM = 3 * _HIST_BINS + 2 * _HIST_BINS + _HIST_BINS + 3 + _FFT_BANDS + 2


def _soft_hist(v: torch.Tensor, bins: int, lo: float = 0.0, hi: float = 1.0) -> torch.Tensor:
    """Triangular-kernel histogram of values v (B, N) on [lo, hi] -> (B, bins), rows summing to 1."""
    centres = torch.linspace(lo, hi, bins, device=v.device, dtype=v.dtype)
    width = (hi - lo) / (bins - 1)
    w = (1 - (v[..., None] - centres).abs() / width).clamp(min=0)  # (B, N, bins)
    return w.sum(1) / v.shape[1]


def image_stats(x: torch.Tensor) -> torch.Tensor:
    """Hand-made image statistics (B, 3, H, W) -> (B, STATS_DIM): per-channel, saturation, value and gradient
    histograms, Laplacian energy at three scales, radial Fourier band energies, and the peak-to-mean ratio of the
    high-frequency spectrum (periodic grid textures). No weights, deterministic, a few ms per batch on a CPU."""
    if min(x.shape[-2:]) < 3:  # the Laplacian below is 3x3 (torch's error would not say which image size)
        raise ValueError(
            f"stats features need images of at least 3x3 pixels, not {x.shape[-1]}x{x.shape[-2]}"
        )
    x = x.float().clamp(0, 1)
    b = x.shape[0]
    feats = [_soft_hist(x[:, c].reshape(b, -1), _HIST_BINS) for c in range(3)]
    mx, mn = x.max(1).values, x.min(1).values  # (B, H, W)
    sat = (mx - mn) / (mx + 1e-6)
    feats += [_soft_hist(sat.reshape(b, -1), _HIST_BINS), _soft_hist(mx.reshape(b, -1), _HIST_BINS)]
    gray = x.mean(1, keepdim=True)  # (B, 1, H, W)
    gx = gray[..., :, 1:] - gray[..., :, :-1]
    gy = gray[..., 1:, :] - gray[..., :-1, :]
    grad = torch.sqrt(gx[..., :-1, :] ** 2 + gy[..., :, :-1] ** 2 + 1e-12)
    feats.append(_soft_hist(torch.log10(grad.reshape(b, -1) + 1e-3), _HIST_BINS, -3.0, 0.0))
    lap_k = torch.tensor([[0, 1, 0], [1, -4, 1], [0, 1, 0]], dtype=x.dtype, device=x.device).view(1, 1, 3, 3)
    laps = []
    g = gray
    for _ in range(3):
        laps.append(F.conv2d(g, lap_k).abs().mean((1, 2, 3)))
        g = F.avg_pool2d(g, 2) if min(g.shape[-2:]) >= 8 else g
    feats.append(torch.log(torch.stack(laps, 1) + 1e-4))
    spec = torch.fft.fftshift(torch.fft.fft2(gray[:, 0] - gray.mean((2, 3))[:, :, None]), dim=(-2, -1)).abs()
    h, w = spec.shape[-2:]
    yy, xx = torch.meshgrid(
        torch.arange(h, device=x.device) - h // 2, torch.arange(w, device=x.device) - w // 2, indexing="ij"
    )
    r = torch.sqrt(yy.float() ** 2 + xx.float() ** 2) / (math.hypot(h, w) / 2)  # 0..1
    total = spec.pow(2).sum((1, 2)) + 1e-8
    edges = torch.linspace(0, 1.0001, _FFT_BANDS + 1)
    bands = [spec.pow(2)[:, (r >= edges[i]) & (r < edges[i + 1])].sum(1) / total for i in range(_FFT_BANDS)]
    feats.append(torch.log(torch.stack(bands, 1) + 1e-8))
    high = spec[:, r > 0.25]
    feats.append(torch.log(high.max(1).values / (high.mean(1) + 1e-8) + 1e-8)[:, None])
    feats.append(torch.log(total)[:, None] / 10)
    return torch.cat(feats, 1)


def describe_encoder(enc: FeatureEncoder) -> dict[str, Any]:
    return {"name": enc.name, "dim": enc.dim}

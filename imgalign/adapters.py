"""Model adapters: the narrow interface the trainers use to drive a flow-matching text-to-image pipeline.

A trainer never touches a pipeline directly. It asks an adapter to

- ``encode(prompts)``: text conditioning for a batch (each distinct prompt encoded once and cached),
- ``init_noise(generators)``: initial latents, one per generator, in the model's own layout (packed tokens
  for FLUX),
- ``sigmas(num_steps)``: the σ schedule (σ_0 = 1 … σ_N = 0, the scheduler's shift applied),
- ``velocity(x, sigma, cond, guidance_scale)``: the (guided) velocity as **one** batched forward,
- ``decode(x)``: images in [0, 1], ``[B, 3, H, W]``,
- ``trainable_named_parameters()`` / ``add_lora(...)`` / ``reference()``: what to train, and the frozen base for
  KL,
- ``save(dir, ...)``: a folder diffusers loads (``from_pretrained(dir)`` or ``pipe.load_lora_weights(dir)``).

Two families are implemented: :class:`SD3Adapter` (``StableDiffusion3Pipeline``: SD3, SD3.5 and the embedded
``shapes`` model; timestep = 1000·σ, true CFG over [uncond; cond]) and :class:`FluxAdapter` (``FluxPipeline``:
FLUX.1; 2×2-packed latent tokens, timestep = σ, guidance as an embedding for the guidance-distilled models, so one
forward per step). Adding a family means one more small subclass and a line in :data:`FAMILIES`.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import re
import shutil
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from imgalign.hub import naming_pipeline, resolve
from imgalign.pipelines import (
    absent_components,
    check_pipeline_folder,
    ignores_guidance,
    quiet_absent_components,
)

log = logging.getLogger(__name__)

DEFAULT_LORA_TARGETS = ["to_k", "to_q", "to_v", "to_out.0"]


@dataclass
class Cond:
    """Text conditioning for a batch: per-token embeddings and a pooled vector (both [B, ...])."""

    embeds: torch.Tensor  # [B, T, D]
    pooled: torch.Tensor  # [B, P]
    text_ids: torch.Tensor | None = None  # FLUX only: [T, 3] position ids of the text tokens

    def index(self, idx: torch.Tensor | slice | Sequence[int]) -> Cond:
        return Cond(self.embeds[idx], self.pooled[idx], self.text_ids)

    @staticmethod
    def cat(items: Sequence[Cond]) -> Cond:
        return Cond(
            torch.cat([c.embeds for c in items]), torch.cat([c.pooled for c in items]), items[0].text_ids
        )


def linear_module_names(module: torch.nn.Module) -> list[str]:
    """The distinct endings of `module`'s Linear layer names that LoRA targets by (``to_q``, ``to_out.0``): the
    default targets first, then the rest sorted."""
    return _target_endings(name for name, m in module.named_modules() if isinstance(m, torch.nn.Linear))


def _target_endings(names: Iterable[str]) -> list[str]:
    """The distinct endings of module `names` a LoRA target names them by (a trailing index keeps its parent:
    ``to_out.0``): the default targets first, then the rest sorted."""
    ends = set()
    for name in names:
        parts = name.split(".")
        ends.add(".".join(parts[-2:]) if parts[-1].isdigit() and len(parts) > 1 else parts[-1])
    return sorted(ends, key=lambda n: (n not in DEFAULT_LORA_TARGETS, n))


@dataclass
class SavedWeights:
    """The tensor names of a transformer saved as safetensors, read from the file headers alone (no weight loads:
    a misspelt setting for a large model is refused in a second, not after minutes of loading)."""

    keys: list[str]  # tensor names, sorted
    modules: set[str]  # every dotted prefix of a tensor name: the module names
    linear: list[str]  # modules with a 2-D weight: Linear layers (or embeddings)
    # modules with a weight of 2 or more dimensions: the layers a LoRA target can select (peft wraps Linear
    # layers, embeddings and convolutions alike: SD3's 'proj' also selects the patch embedding's Conv2d)
    layers: list[str]


def read_saved_weights(transformer_dir: str | Path) -> SavedWeights | None:
    """:class:`SavedWeights` of the safetensors files in `transformer_dir`; None when it holds no readable one
    (the checks after loading then apply)."""
    from safetensors import SafetensorError, safe_open

    keys, modules, linear, layers = [], set(), [], []
    try:
        for f in sorted(Path(transformer_dir).glob("*.safetensors")):
            with safe_open(str(f), framework="pt") as fh:
                for key in fh.keys():
                    parts = key.split(".")[:-1]
                    keys.append(key)
                    modules.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
                    dims = len(fh.get_slice(key).get_shape()) if key.endswith(".weight") else 0
                    if dims >= 2:
                        layers.append(".".join(parts))
                    if dims == 2:
                        linear.append(".".join(parts))
    except (OSError, SafetensorError):
        return None
    if not keys:
        return None
    return SavedWeights(sorted(set(keys)), modules, sorted(set(linear)), sorted(set(layers)))


def saved_lora_targets_error(saved: SavedWeights, targets: Sequence[str]) -> str | None:
    """:func:`lora_targets_error`'s message for `targets` that name no module of the `saved` transformer; None
    when every target names one (whether it is a Linear layer is checked once the model has loaded)."""
    matches = {t: [n for n in saved.modules if n == t or n.endswith("." + t)] for t in targets}
    return None if all(matches.values()) else lora_targets_error(matches, _target_endings(saved.linear))


def saved_trainable_names(saved: SavedWeights, lora_targets: Sequence[str] | None) -> list[str]:
    """The names the trainable parameters of the `saved` transformer will have: every weight for full
    fine-tuning (`lora_targets` None), else the ``lora_A``/``lora_B`` weights of the layers (Linear or
    convolution) the targets select (peft's names for :meth:`FlowAdapter.add_lora`'s adapter, "default")."""
    if lora_targets is None:
        return saved.keys
    selected = sorted({n for n in saved.layers for t in lora_targets if n == t or n.endswith("." + t)})
    return [f"{m}.lora_{ab}.default.weight" for m in selected for ab in "AB"]


def trainable_modules_error(patterns: Sequence[str], names: Sequence[str]) -> str | None:
    """The message for ``model.trainable_modules`` `patterns` that ``re.search`` finds in none of the trainable
    parameter `names`; None when one matches."""
    if any(re.search(p, n) for n in names for p in patterns):
        return None
    return (
        f"model.trainable_modules {list(patterns)} matches none of the {len(names)} trainable parameters (e.g. "
        f"{', '.join(names[:6])}); give patterns that re.search finds in those names"
    )


def unwrap_lora_layers(module: torch.nn.Module) -> None:
    """Put back, in place, the layer each peft LoRA layer in `module` wraps (undoes a failed injection)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    for name, sub in list(module.named_modules()):
        if isinstance(sub, BaseTunerLayer):
            parent_name, _, child = name.rpartition(".")
            setattr(module.get_submodule(parent_name), child, sub.get_base_layer())


def lora_target_matches(module: torch.nn.Module, targets: Sequence[str]) -> dict[str, list[torch.nn.Module]]:
    """The modules each LoRA target name selects (peft matches a name against the ends of module names)."""
    found: dict[str, list[torch.nn.Module]] = {t: [] for t in targets}
    for name, m in module.named_modules():
        for t in targets:
            if name == t or name.endswith("." + t):
                found[t].append(m)
    return found


def lora_targets_error(matches: dict[str, list[Any]], examples: Sequence[str], cause: str = "") -> str:
    """What is wrong with ``model.lora_targets``, and what to give: names that select no module, or (when peft
    refused the selection, `cause`) names that select modules other than Linear layers. `matches`: the modules
    each target selects (their names, without `cause`)."""
    problems = [f"{t!r} names no module" for t, ms in matches.items() if not ms]
    problems += [
        f"{t!r} names a {type(next(m for m in ms if not isinstance(m, torch.nn.Linear))).__name__}, not a Linear layer"
        for t, ms in matches.items()
        if cause and not all(isinstance(m, torch.nn.Linear) for m in ms)
    ]
    why = "; ".join(problems) or cause
    return (
        f"model.lora_targets {list(matches)}: {why}; give names (or name endings) of the transformer's Linear "
        f"layers, e.g. {', '.join(examples[:8])}"
    )


class FlowAdapter:
    """Base class: common state (pipeline, transformer, device, compute dtype) and the prompt cache."""

    family = "base"
    pipeline_class_name = ""
    default_max_sequence_length = 256
    # transformer evaluations by velocity() so far, CFG counted as 2 (the trainer reads differences)
    nfe_count = 0

    def __init__(
        self,
        pipe: Any,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        height: int | None = None,
        width: int | None = None,
        max_sequence_length: int | None = None,
    ) -> None:
        self.pipe = pipe
        self.device = torch.device(device)
        self.dtype = dtype
        self.transformer = pipe.transformer
        # the pipelines' own defaults (SD3: 256 T5 tokens, zero-padded when T5 is absent; FLUX: 512)
        self.max_sequence_length = max_sequence_length or self.default_max_sequence_length
        pipe.to(self.device)
        if self.transformer.dtype != dtype:  # a no-op cast would still log diffusers' fp32-modules warning
            self.transformer.to(self.device, dtype)
        for name in ("text_encoder", "text_encoder_2", "text_encoder_3", "vae"):
            m = getattr(pipe, name, None)
            if m is not None:
                m.requires_grad_(False).eval()
        self.transformer.requires_grad_(False)
        default = self.default_resolution()
        self.height = height or default
        self.width = width or default
        m, top = self.resolution_multiple(), self.max_resolution()
        for what, v in (("height", self.height), ("width", self.width)):
            if v % m or v <= 0:
                raise ValueError(
                    f"{what} {v} does not fit this model: use a multiple of {m} (VAE factor x patch size), e.g. "
                    f"{max(m, v // m * m)} (model.resolution)"
                )
            # it failed at the first forward pass, after the model loaded, in diffusers' words ("Height (16) cannot
            # be greater than `pos_embed_max_size`: 8"), naming no setting
            if top is not None and v > top:
                raise ValueError(
                    f"{what} {v} is larger than this model can take: at most {top} (its positional-embedding grid "
                    f"of {top // m} patches of {m} pixels); use a multiple of {m} up to {top} (model.resolution)"
                )
        self._cache: dict[str, Cond] = {}
        self._reference: torch.nn.Module | None = None
        self.lora_config: dict[str, Any] | None = None

    # ---- construction ----------------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(
        cls, path: str, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32, **kwargs: Any
    ) -> FlowAdapter:
        import diffusers

        pipe_cls = getattr(diffusers, cls.pipeline_class_name)
        # text encoders and transformer load in the frozen dtype (T5-XXL is 19 GB in float32), the VAE in float32
        # (small, and decoded images feed the rewards); trainable weights are made float32 by the trainer
        dtypes = {"default": dtype, "vae": torch.float32}
        with naming_pipeline(path):
            pipe = pipe_cls.from_pretrained(path, dtype=dtypes, **absent_components(path))
        return cls(pipe, device=device, dtype=dtype, **kwargs)

    def default_resolution(self) -> int:
        return int(self.transformer.config.sample_size) * self.vae_scale_factor

    def resolution_multiple(self) -> int:
        """Image sides must be multiples of this (the pipeline's own check)."""
        return self.vae_scale_factor * int(getattr(self.transformer.config, "patch_size", 1) or 1)

    def max_resolution(self) -> int | None:
        """The largest image side the transformer takes: SD3's positional-embedding grid (``pos_embed_max_size``
        patches) in pixels; None when unbounded (no grid set: SD3 computes its embedding for any size; FLUX: RoPE)."""
        grid = getattr(self.transformer.config, "pos_embed_max_size", None)
        return int(grid) * self.resolution_multiple() if grid else None

    @property
    def vae_scale_factor(self) -> int:
        return 2 ** (len(self.pipe.vae.config.block_out_channels) - 1)

    # ---- prompts ---------------------------------------------------------------------------------------------
    def encode(self, prompts: Sequence[str]) -> Cond:
        """Conditioning for `prompts` [B]; every distinct prompt is encoded once and cached (text encoders are
        frozen). Each prompt is encoded on its own, so its embedding is a function of the prompt alone and not of
        which prompts it first shared a batch with (batched matmuls differ in the last bits): a resumed run
        reproduces an uninterrupted one even when the prompt sequence wraps around."""
        missing = sorted({p for p in prompts if p not in self._cache})
        with torch.no_grad():
            for p in missing:
                c = self._encode_uncached([p])
                self._cache[p] = Cond(c.embeds.float(), c.pooled.float(), c.text_ids)
        return Cond.cat([self._cache[p] for p in prompts])

    def _encode_uncached(self, prompts: list[str]) -> Cond:  # pragma: no cover - abstract
        raise NotImplementedError

    # ---- sampling pieces -------------------------------------------------------------------------------------
    def latent_shape(self) -> tuple[int, ...]:  # pragma: no cover - abstract
        raise NotImplementedError

    def init_noise(self, generators: Sequence[torch.Generator]) -> torch.Tensor:
        """One standard-normal latent per generator (so each sample's noise is independent of batch layout):
        [len(generators), *latent_shape] float32."""
        shape = self.latent_shape()
        return torch.stack([torch.randn(shape, generator=g) for g in generators]).to(self.device)

    def sigmas(self, num_steps: int) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def nfe_per_step(self, guidance_scale: float) -> int:
        """Transformer evaluations per denoising step per sample (CFG counts 2)."""
        return 2 if self.uses_cfg(guidance_scale) else 1

    def uses_cfg(self, guidance_scale: float) -> bool:
        return guidance_scale > 1.0

    def reads_guidance(self) -> bool:
        """Whether a guidance scale changes what the model samples (CFG above 1, or a guidance embedding)."""
        return True

    def negative_cond(self, n: int) -> Cond:
        return self.encode([""] * n)

    def velocity(
        self,
        x: torch.Tensor,
        sigma: torch.Tensor | float,
        cond: Cond,
        guidance_scale: float = 1.0,
        transformer: torch.nn.Module | None = None,
    ) -> torch.Tensor:
        """Guided velocity [B, ...] float32 at noise level σ (scalar or [B]); with CFG one forward over
        [uncond; cond] and v = v_u + w·(v_c − v_u)."""
        model = transformer if transformer is not None else self.transformer
        b = x.shape[0]
        self.nfe_count += b * self.nfe_per_step(guidance_scale)
        sig = torch.as_tensor(sigma, dtype=torch.float32, device=self.device).expand(b)
        if self.uses_cfg(guidance_scale):
            neg = self.negative_cond(b)
            out = self._forward(
                model, torch.cat([x, x]), torch.cat([sig, sig]), Cond.cat([neg, cond]), guidance_scale
            )
            v_u, v_c = out.chunk(2)
            return v_u + guidance_scale * (v_c - v_u)
        return self._forward(model, x, sig, cond, guidance_scale)

    def _forward(
        self, model: torch.nn.Module, x: torch.Tensor, sigma: torch.Tensor, cond: Cond, guidance_scale: float
    ) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        """Latents (model layout) -> images [B, 3, H, W] float32 in [0, 1]."""
        vae = self.pipe.vae
        lat = self._unpack(x).to(self.device, vae.dtype)
        lat = lat / vae.config.scaling_factor + (vae.config.shift_factor or 0.0)
        with torch.no_grad():
            img = vae.decode(lat, return_dict=False)[0]
        return (img.float() / 2 + 0.5).clamp(0, 1)

    def _unpack(self, x: torch.Tensor) -> torch.Tensor:
        return x

    # ---- training --------------------------------------------------------------------------------------------
    def add_lora(
        self, rank: int, alpha: float, target_modules: Sequence[str] | None = None, init_seed: int = 0
    ) -> None:
        """Attach a peft LoRA adapter to the transformer (only its weights train; the base stays frozen)."""
        from peft import LoraConfig

        # peft would refuse a second "default" adapter on the modules it wrapped (read as "not a Linear layer")
        if self.lora_config is not None:
            raise ValueError(
                f"this model already has a LoRA (rank {self.lora_config['rank']}); add_lora attaches one per "
                "adapter: load the model again for another"
            )
        targets = list(target_modules or DEFAULT_LORA_TARGETS)
        cfg = LoraConfig(r=rank, lora_alpha=alpha, init_lora_weights="gaussian", target_modules=targets)
        # read before peft wraps any module (a failed add_adapter may leave some wrapped)
        matches = lora_target_matches(self.transformer, targets)
        examples = linear_module_names(self.transformer)
        if not all(matches.values()):  # peft would skip such a name silently when another one matches
            raise ValueError(lora_targets_error(matches, examples))
        # diffusers sets this before peft injects anything; put back when peft refuses
        loaded = getattr(self.transformer, "_hf_peft_config_loaded", False)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)  # the LoRA A init is seeded: runs and resumes are reproducible
            try:
                self.transformer.add_adapter(cfg)
            except ValueError as e:  # peft's "Target module <88-line repr> is not supported"
                # peft wrapped the modules it met before the one it refused: unwrap them, so the model is as
                # before and another add_lora works
                unwrap_lora_layers(self.transformer)
                self.transformer._hf_peft_config_loaded = loaded
                cause = str(e).splitlines()[0][:200]
                raise ValueError(lora_targets_error(matches, examples, cause)) from None
        self.lora_config = {"rank": rank, "alpha": alpha, "target_modules": targets}
        for n, p in self.transformer.named_parameters():
            p.requires_grad_("lora_" in n)

    def enable_full_finetune(self, keep_reference: bool) -> None:
        """Train every transformer weight; keep a frozen copy as the KL reference when asked."""
        if keep_reference:
            self._reference = copy.deepcopy(self.transformer).requires_grad_(False).eval()
        self.transformer.requires_grad_(True)

    def restrict_trainable(self, patterns: Sequence[str]) -> list[str]:
        """Keep training only the trainable transformer weights whose name matches one of the regular expressions
        `patterns` (``re.search``); freeze the rest. Returns the names kept; raises if none matches."""
        trainable = self.trainable_named_parameters()
        kept = [n for n, _ in trainable if any(re.search(p, n) for p in patterns)]
        if not kept:
            raise ValueError(trainable_modules_error(patterns, [n for n, _ in trainable]))
        keep = set(kept)
        for n, p in trainable:
            p.requires_grad_(n in keep)
        return kept

    def trainable_named_parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        return [(n, p) for n, p in self.transformer.named_parameters() if p.requires_grad]

    @contextlib.contextmanager
    def reference(self) -> Iterator[torch.nn.Module]:
        """The frozen base model: the LoRA-disabled transformer, or the copy kept at the start of full
        fine-tuning."""
        if self.lora_config is not None:
            self.transformer.disable_adapters()
            try:
                yield self.transformer
            finally:
                self.transformer.enable_adapters()
        elif self._reference is not None:
            yield self._reference
        else:
            raise RuntimeError(
                "no reference model: enable full fine-tuning with keep_reference=True or add LoRA"
            )

    def enable_gradient_checkpointing(self) -> None:
        self.transformer.enable_gradient_checkpointing()

    # ---- saving ----------------------------------------------------------------------------------------------
    def save(self, out_dir: str | Path, base_model: str = "") -> None:
        """Write a diffusers-loadable folder: a LoRA (``pytorch_lora_weights.safetensors``, for
        ``pipe.load_lora_weights(dir)``) or the whole pipeline (``from_pretrained(dir)`` with the arguments its base
        model needs, e.g. ``text_encoder_3=None, tokenizer_3=None`` for the T5-less shapes model), plus
        ``imgalign_model.json`` naming the base model (so :func:`imgalign.pipelines.load_pipeline` can rebuild a
        LoRA pipeline)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        if self.lora_config is not None:
            from peft.utils import get_peft_model_state_dict

            layers = get_peft_model_state_dict(self.transformer)
            # the adapter metadata (rank, alpha, targets) travels in the safetensors header, so diffusers scales
            # the LoRA by alpha/r on load exactly as in training
            meta = self.transformer.peft_config["default"].to_dict()
            type(self.pipe).save_lora_weights(
                str(out), transformer_lora_layers=layers, transformer_lora_adapter_metadata=meta
            )
        else:
            with quiet_absent_components():
                self.pipe.save_pretrained(str(out))
            # keep the base model's component index (how it declares absent parts such as T5), so whatever loads
            # the base model loads the fine-tune the same way
            base_index = Path(resolve(base_model)) / "model_index.json" if base_model else None
            if base_index is not None and base_index.is_file():
                shutil.copyfile(base_index, out / "model_index.json")
        info = {"family": self.family, "base_model": base_model, "lora": self.lora_config}
        (out / "imgalign_model.json").write_text(json.dumps(info, indent=2) + "\n")


class SD3Adapter(FlowAdapter):
    """``StableDiffusion3Pipeline`` (SD3, SD3.5, the embedded ``shapes`` model): timestep = 1000·σ; T5 optional."""

    family = "sd3"
    pipeline_class_name = "StableDiffusion3Pipeline"

    def _encode_uncached(self, prompts: list[str]) -> Cond:
        pe, _, pooled, _ = self.pipe.encode_prompt(
            prompt=prompts,
            prompt_2=None,
            prompt_3=None,
            device=self.device,
            do_classifier_free_guidance=False,
            max_sequence_length=self.max_sequence_length,
        )
        return Cond(pe, pooled)

    def latent_shape(self) -> tuple[int, ...]:
        c = self.transformer.config.in_channels
        f = self.vae_scale_factor
        return (c, self.height // f, self.width // f)

    def sigmas(self, num_steps: int) -> torch.Tensor:
        from diffusers.pipelines.stable_diffusion_3.pipeline_stable_diffusion_3 import calculate_shift

        sched = copy.deepcopy(self.pipe.scheduler)
        kwargs = {}
        if sched.config.get("use_dynamic_shifting", None):
            p = self.transformer.config.patch_size
            seq = (self.height // self.vae_scale_factor // p) * (self.width // self.vae_scale_factor // p)
            kwargs["mu"] = calculate_shift(
                seq,
                sched.config.get("base_image_seq_len", 256),
                sched.config.get("max_image_seq_len", 4096),
                sched.config.get("base_shift", 0.5),
                sched.config.get("max_shift", 1.16),
            )
        sched.set_timesteps(num_steps, device="cpu", **kwargs)
        return sched.sigmas.float().clone()

    def _forward(
        self, model: torch.nn.Module, x: torch.Tensor, sigma: torch.Tensor, cond: Cond, guidance_scale: float
    ) -> torch.Tensor:
        out = model(
            hidden_states=x.to(self.dtype),
            timestep=(sigma * 1000.0).float(),  # float32, as the pipeline passes it
            encoder_hidden_states=cond.embeds.to(self.dtype),
            pooled_projections=cond.pooled.to(self.dtype),
            return_dict=False,
        )[0]
        return out.float()


class FluxAdapter(FlowAdapter):
    """``FluxPipeline`` (FLUX.1): latents packed into 2×2 tokens, timestep = σ, resolution-dependent shift (μ),
    and, for guidance-distilled models (``guidance_embeds``), the guidance scale as an input: one forward per step."""

    family = "flux"
    pipeline_class_name = "FluxPipeline"
    default_max_sequence_length = 512

    def default_resolution(self) -> int:
        # FLUX transformers have no sample_size; the VAE's does
        return int(self.pipe.vae.config.sample_size)

    def _encode_uncached(self, prompts: list[str]) -> Cond:
        pe, pooled, text_ids = self.pipe.encode_prompt(
            prompt=prompts, prompt_2=None, device=self.device, max_sequence_length=self.max_sequence_length
        )
        return Cond(pe, pooled, text_ids)

    def uses_cfg(self, guidance_scale: float) -> bool:
        return False  # FLUX.1-dev/schnell: guidance is distilled into an embedding (no true CFG)

    def reads_guidance(self) -> bool:
        return not ignores_guidance(self.transformer)  # FLUX.1-schnell has no guidance embedding

    def _grid(self) -> tuple[int, int]:
        f = self.vae_scale_factor
        return 2 * (self.height // (f * 2)), 2 * (self.width // (f * 2))

    def latent_shape(self) -> tuple[int, ...]:
        h, w = self._grid()
        c = self.transformer.config.in_channels  # = 4 × VAE latent channels
        return ((h // 2) * (w // 2), c)

    def resolution_multiple(self) -> int:
        return self.vae_scale_factor * 2  # 2x2 latent patches

    def init_noise(self, generators: Sequence[torch.Generator]) -> torch.Tensor:
        """Drawn as ``FluxPipeline.prepare_latents`` draws it ([C/4, h, w] per generator, then packed), so a seed
        gives the pipeline's own starting noise: [len(generators), tokens, C] float32."""
        h, w = self._grid()
        c = self.transformer.config.in_channels // 4
        noise = torch.stack([torch.randn((c, h, w), generator=g) for g in generators])
        return self.pipe._pack_latents(noise, len(generators), c, h, w).to(self.device)

    def sigmas(self, num_steps: int) -> torch.Tensor:
        import numpy as np
        from diffusers.pipelines.flux.pipeline_flux import calculate_shift

        sched = copy.deepcopy(self.pipe.scheduler)
        seq = self.latent_shape()[0]
        mu = calculate_shift(
            seq,
            sched.config.get("base_image_seq_len", 256),
            sched.config.get("max_image_seq_len", 4096),
            sched.config.get("base_shift", 0.5),
            sched.config.get("max_shift", 1.15),
        )
        sched.set_timesteps(sigmas=np.linspace(1.0, 1 / num_steps, num_steps), device="cpu", mu=mu)
        return sched.sigmas.float().clone()

    def _forward(
        self, model: torch.nn.Module, x: torch.Tensor, sigma: torch.Tensor, cond: Cond, guidance_scale: float
    ) -> torch.Tensor:
        h, w = self._grid()
        img_ids = self.pipe._prepare_latent_image_ids(x.shape[0], h // 2, w // 2, self.device, self.dtype)
        guidance = None
        if self.transformer.config.guidance_embeds:
            guidance = torch.full([x.shape[0]], guidance_scale, device=self.device, dtype=torch.float32)
        out = model(
            hidden_states=x.to(self.dtype),
            timestep=(sigma * 1000.0).to(self.dtype) / 1000.0,  # the pipeline's t.to(dtype) / 1000
            guidance=guidance,
            pooled_projections=cond.pooled.to(self.dtype),
            encoder_hidden_states=cond.embeds.to(self.dtype),
            txt_ids=cond.text_ids.to(self.device, self.dtype),
            img_ids=img_ids,
            return_dict=False,
        )[0]
        return out.float()

    def _unpack(self, x: torch.Tensor) -> torch.Tensor:
        h, w = self._grid()
        f = self.vae_scale_factor
        return self.pipe._unpack_latents(x, h * f, w * f, f)


FAMILIES: dict[str, type[FlowAdapter]] = {"sd3": SD3Adapter, "flux": FluxAdapter}
PIPELINE_TO_FAMILY = {cls.pipeline_class_name: name for name, cls in FAMILIES.items()}


def detect_family(path: str | Path) -> str:
    """The adapter family of a diffusers pipeline folder or cached Hub id, from its ``model_index.json``."""
    from imgalign.hub import looks_like_path, model_index_file

    index = model_index_file(path)
    if not index.is_file() and not looks_like_path(str(path)):
        # a Hub id (examples/sd35m's stabilityai/stable-diffusion-3.5-medium) was called no pipeline folder, even
        # when downloaded
        raise FileNotFoundError(
            f"{str(path)!r} is no local folder, and its model_index.json is not in the local Hugging Face cache; "
            f"download it once (hf download {path}), give a local pipeline folder, or set model.family"
        )
    if not index.is_file():
        raise FileNotFoundError(
            f"{str(path)!r} is not a diffusers pipeline folder (no model_index.json); give a local pipeline folder, "
            "an embedded model name such as 'shapes', or set model.family"
        )
    cls_name = json.loads(index.read_text()).get("_class_name", "")
    if cls_name not in PIPELINE_TO_FAMILY:
        raise ValueError(
            f"{str(path)!r} holds a {cls_name!r}; supported pipelines: {', '.join(sorted(PIPELINE_TO_FAMILY))}"
        )
    return PIPELINE_TO_FAMILY[cls_name]


def load_adapter(
    path: str | Path,
    family: str | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    **kwargs: Any,
) -> FlowAdapter:
    """Load a pipeline folder (or embedded name) into its family's adapter. Without ``max_sequence_length``, a model
    of the shapes architecture gets the context length it was trained with (one zero 'T5' token; with the
    pipeline's 256 its samples lose the prompt), other models their pipeline's default."""
    from imgalign import hub

    if not kwargs.get("max_sequence_length"):
        from imgalign.eval.models import shapes_max_sequence_length

        kwargs["max_sequence_length"] = shapes_max_sequence_length(str(path))
    resolved = hub.resolve(path)
    if Path(resolved).is_dir():
        # what the CLI checks first: a damaged model_index.json entry ("vae": [null]) otherwise loaded a pipeline
        # without that part, which failed later with "'NoneType' object has no attribute 'config'"
        check_pipeline_folder(Path(resolved))
    fam = family or detect_family(resolved)
    if fam not in FAMILIES:
        raise ValueError(f"unknown model family {fam!r}; valid families: {', '.join(sorted(FAMILIES))}")
    return FAMILIES[fam].from_pretrained(resolved, device=device, dtype=dtype, **kwargs)

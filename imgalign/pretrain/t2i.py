"""Pretraining of the embedded text-to-image model ``shapes``: a tiny stock ``StableDiffusion3Pipeline``.

Two stages, both seeded and resumable (atomic checkpoints of model, optimizer, step and RNG states in
``OUT/t2i-work/``; rerunning the same command continues where it stopped):

1. ``AutoencoderKL`` (64x64 RGB -> 16x16x4 latents) trained on shapes renders with an L1 + MSE reconstruction loss
   and a small KL term, then frozen; its ``scaling_factor`` / ``shift_factor`` are set so latents have zero mean and
   unit variance. Two terms make the latent space easier to model (both on by default): ``vae_mix`` (decoding a
   mix of two latents must give the same mix of the images) and ``vae_noise`` (the decoder reconstructs clean
   images from noisy latents).
2. ``SD3Transformer2DModel`` (default patch 2 -> 64 image tokens; ``patch=4`` gives 16) trained with rectified
   flow matching (Esser et al. 2024, SD3 paper, eq. 1-3 with logit-normal t): ``x_t = (1 - t) x0 + t eps``, target
   ``v = eps - x0``, jointly with two tiny ``CLIPTextModelWithProjection`` encoders whose tokenizer is the shapes
   vocabulary (:mod:`imgalign.pretrain.tokenizer`); prompts are dropped to "" with probability ``cfg_dropout`` for
   classifier-free guidance. Prompts are encoded with the pipeline's own ``encode_prompt``, so training sees exactly
   the context a user's pipeline call builds. An EMA of the trained weights is what ships.

The finished pipeline is written with ``save_pretrained`` to ``OUT/shapes-t2i`` with a model card.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from imgalign.config import field
from imgalign.files import atomic_write_text
from imgalign.pretrain import card_command, config_changes, load_state, restores_torch_threads
from imgalign.shapes import IMAGE_SIZE

FOLDER = "shapes-t2i"
WORK = "t2i-work"
LOSS_LOG_EVERY = 50  # transformer steps per loss row of the card's training log (a mean over those steps)


IMAGE_SIDE = IMAGE_SIZE  # pixels: the shapes world's render size
LATENT_SIDE = IMAGE_SIDE // 4  # the autoencoder downsamples twice: 64x64x3 -> 16x16x4
LR_FLOOR = 0.1  # lr_at's cosine ends at this fraction of the peak


@dataclass
class Config:
    seed: int = field(0, help="seed of data, initialisation, noise and dropout")
    init_from: str = field(
        "",
        help="continue pretraining a shapes-architecture pipeline instead of starting from random weights: the "
        "embedded name `shapes` or a folder this command (or a full fine-tune) wrote. Its autoencoder is kept "
        "frozen (the autoencoder stage is skipped), its text encoders and transformer are trained further; the "
        "architecture settings must match the model's (they are checked before it loads)",
    )
    threads: int = field(
        1,
        help="torch CPU threads (on a shared, oversubscribed 2-core machine 1 thread was ~10x faster than 2)",
    )
    bf16: bool = field(False, help="bf16 autocast (slower than fp32 on AVX2-only CPUs: ~40x slower matmuls)")
    # data
    n_images: int = field(
        20000, help="pre-rendered training images (rendered once, cached in the work folder)"
    )
    # autoencoder
    vae_channels: list[int] = field(default_factory=lambda: [8, 16, 32], help="AutoencoderKL block channels")
    vae_groups: int = field(
        2,
        help="GroupNorm groups of the autoencoder (one channel per group erases colour: keep several per group)",
    )
    vae_steps: int = field(700, help="autoencoder training steps")
    vae_batch: int = field(16, help="autoencoder batch size")
    vae_crop: int = field(32, help="side of the random crops the (convolutional) autoencoder trains on")
    vae_lr: float = field(2e-3, help="autoencoder AdamW learning rate")
    vae_fg_weight: float = field(
        5.0, help="reconstruction-loss weight of object pixels relative to background"
    )
    vae_kl: float = field(1e-6, help="weight of the KL term of the autoencoder loss")
    vae_mix: float = field(
        1.0,
        help="weight of the latent-linearity loss: decode(a z1 + (1-a) z2) must reconstruct a x1 + (1-a) x2 for "
        "random pairs of the batch and a ~ U(0, 1), so averages of latents decode to averages of images as in pixel "
        "space (without it a latent average decodes to full-strength objects of the wrong colour; 0: off)",
    )
    vae_noise: float = field(
        0.5,
        help="decoder noise augmentation: the decoder reconstructs the clean image from latents plus Gaussian noise "
        "of std U(0, vae_noise) x the batch's per-channel latent std, so the transformer's small latent errors "
        "decode to clean shapes instead of colour speckles (0: off)",
    )
    # text encoders
    text_width: int = field(64, help="hidden size of each of the two CLIP text encoders")
    text_layers: int = field(3, help="layers of each text encoder (the pipeline reads the penultimate one)")
    max_length: int = field(12, help="tokenizer model_max_length (CLIP context tokens)")
    t5_tokens: int = field(
        1, help="zero 'T5' tokens the pipeline appends (max_sequence_length); see sampling.py"
    )
    # transformer
    layers: int = field(5, help="SD3 joint transformer blocks")
    heads: int = field(3, help="attention heads (head dim 32)")
    patch: int = field(
        2,
        help=f"transformer patch size on the {LATENT_SIDE}x{LATENT_SIDE} latents (2: "
        f"{(LATENT_SIDE // 2) ** 2} image tokens, 4: {(LATENT_SIDE // 4) ** 2})",
    )
    steps: int = field(10000, help="transformer training steps")
    batch_size: int = field(64, help="transformer batch size")
    lr: float = field(8e-4, help="AdamW peak learning rate (transformer and text encoders)")
    warmup: int = field(200, help="linear warm-up steps")
    weight_decay: float = field(0.01, help="AdamW weight decay")
    cfg_dropout: float = field(
        0.1, help="probability of training on the empty prompt (classifier-free guidance)"
    )
    logit_mean: float = field(0.0, help="mean of the logit-normal t distribution")
    logit_std: float = field(1.0, help="std of the logit-normal t distribution")
    ema: float = field(0.999, help="EMA decay of the shipped weights")
    shift: float = field(1.0, help="FlowMatchEulerDiscreteScheduler shift")
    # bookkeeping
    ckpt_every: int = field(500, help="steps between checkpoints")
    eval_every: int = field(1000, help="steps between quick evaluations (0: only at the end)")
    eval_prompts: int = field(48, help="eval-set prompts (spread over the tasks) in the quick evaluation")
    final_eval_images: int = field(
        4, help="images per prompt of the full shapes-suite evaluation at the end (0: skip)"
    )

    def validate(self) -> None:
        from imgalign.config import check_seed
        from imgalign.pretrain.encoder_common import check_at_least, check_rates, check_weights

        check_seed("seed", self.seed)
        check_rates(self, "lr", "vae_lr")
        # a negative weight or decay passed and trained away from its target; inf trained to NaN
        check_weights(self, "vae_fg_weight", positive=True)
        check_weights(self, "vae_kl", "vae_mix", "vae_noise", "weight_decay")
        if not math.isfinite(self.logit_mean):
            raise ValueError(
                f"logit_mean must be finite (got {self.logit_mean}); set it with --set logit_mean=X"
            )

        check_at_least(
            self,
            1,
            "steps",
            "vae_steps",
            "threads",
            "n_images",
            "vae_batch",
            "batch_size",
            "ckpt_every",
            "eval_prompts",
            "layers",
            "heads",
            "text_layers",
            "text_width",
            "vae_groups",
            "vae_crop",  # a crop of 0 passed and the autoencoder failed on it after the renders
        )
        # -1 final images passed and the card reported a shapes overall of 0.000 from no image at all
        check_at_least(self, 0, "final_eval_images", "eval_every", "warmup")
        # an odd width passed and the text encoders (2 attention heads each) failed to build only after the renders
        # and the whole autoencoder stage, with a StrictDataclassClassValidationError traceback
        if self.text_width % 2:
            raise ValueError(
                f"text_width must be even (got {self.text_width}): each text encoder has 2 attention heads; set "
                "it with --set text_width=N"
            )
        if self.t5_tokens < 0:
            raise ValueError(
                f"t5_tokens must be at least 0 (got {self.t5_tokens}); set it with --set t5_tokens=N"
            )
        if any(c < 1 or c % self.vae_groups for c in self.vae_channels):
            raise ValueError(
                f"vae_channels {list(self.vae_channels)} must be positive multiples of vae_groups ({self.vae_groups}), "
                "the autoencoder's GroupNorm groups"
            )
        # a shift <= 0 maps some sigmas through 0 or below (division by zero in the scheduler), and a std <= 0 is
        # no distribution (a negative one passed silently as its absolute value)
        for name in ("shift", "logit_std"):
            if not 0 < getattr(self, name) < math.inf:
                raise ValueError(f"{name} must be > 0 and finite (got {getattr(self, name)})")
        if not 0 <= self.ema < 1:
            raise ValueError(f"ema must be in [0, 1) (got {self.ema})")
        if self.vae_crop > IMAGE_SIDE:
            raise ValueError(f"vae_crop must be at most the image side, {IMAGE_SIDE} (got {self.vae_crop})")
        if not 0 <= self.cfg_dropout < 1:
            raise ValueError("cfg_dropout must be in [0, 1)")
        if self.max_length < 12:
            raise ValueError(
                "max_length must be at least 12 (the longest shapes prompt is 10 words + 2 specials)"
            )
        if self.patch not in (1, 2, 4, 8) or self.vae_crop % 4:
            raise ValueError("patch must be 1, 2, 4 or 8 and vae_crop a multiple of 4")
        if len(self.vae_channels) != 3:
            raise ValueError(
                f"vae_channels needs 3 entries ({IMAGE_SIDE}x{IMAGE_SIDE} -> {LATENT_SIDE}x{LATENT_SIDE} latents)"
            )


# ---- pure pieces ----------------------------------------------------------------------------------------------
def flow_matching_pair(
    x0: torch.Tensor, eps: torch.Tensor, t: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rectified-flow interpolant and velocity target (SD3 paper, Esser et al. 2024, eq. 2-3 with a=1-t, b=t).

    x0, eps: (B, C, H, W); t: (B,) in (0, 1). Returns x_t = (1-t) x0 + t eps and v = eps - x0, both (B, C, H, W)."""
    tt = t.view(-1, 1, 1, 1)
    return (1 - tt) * x0 + tt * eps, eps - x0


def logit_normal(n: int, mean: float, std: float, generator: torch.Generator) -> torch.Tensor:
    """t = sigmoid(N(mean, std^2)) (SD3 paper sec. 3.1, 'logit-normal sampling'): (n,)."""
    return torch.sigmoid(mean + std * torch.randn(n, generator=generator))


def lr_at(step: int, peak: float, warmup: int, total: int) -> float:
    """Linear warm-up, then cosine decay to ``LR_FLOOR`` (10%) of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (LR_FLOOR + (1 - LR_FLOOR) * 0.5 * (1 + math.cos(math.pi * p)))


def recon_loss(rec: torch.Tensor, x: torch.Tensor, fg_weight: float) -> torch.Tensor:
    """L1 + squared error per pixel, pixels off the flat background weighted `fg_weight` times more (objects
    cover ~10% of a render; without the weight the colours are learned last). rec, x: (B, 3, H, W) in [-1, 1]."""
    from imgalign.shapes import BACKGROUND

    bg = torch.tensor(BACKGROUND, dtype=x.dtype).view(1, 3, 1, 1) / 127.5 - 1
    w = 1 + (fg_weight - 1) * ((x - bg).abs().amax(1, keepdim=True) > 0.02).float()  # (B, 1, H, W)
    err = (rec - x).abs() + (rec - x) ** 2
    return (w * err).sum() / (w.sum() * x.shape[1])


def decoder_noise(mean: torch.Tensor, max_rel: float, generator: torch.Generator) -> torch.Tensor:
    """Noise for decoder augmentation: std U(0, max_rel) per sample, relative to each channel's std over the batch
    (so the encoder cannot outgrow it by scaling its latents). mean: (B, C, h, w) posterior means; returns the same
    shape."""
    b = mean.shape[0]
    rel = torch.rand(b, 1, 1, 1, generator=generator) * max_rel  # (B, 1, 1, 1)
    scale = mean.std(dim=(0, 2, 3), keepdim=True)  # (1, C, 1, 1)
    return rel * scale * torch.randn(mean.shape, generator=generator)


# ---- continuing from a model ---------------------------------------------------------------------------------
def init_folder(init_from: str) -> Path:
    """The pipeline folder `init_from` names (an embedded name or a path), checked to be complete."""
    from imgalign.hub import resolve
    from imgalign.pipelines import LORA_FILES, IncompleteModelError, check_pipeline_folder

    folder = Path(resolve(init_from))
    # a LoRA checkpoint (RUN/checkpoints/step-N of a LoRA run) was called "incomplete: it holds neither its LoRA
    # weights ... nor a model_index.json" while holding them
    if not (folder / "model_index.json").is_file() and any((folder / f).is_file() for f in LORA_FILES):
        raise IncompleteModelError(
            "a LoRA checkpoint (LoRA weights over a base model), not a whole pipeline to continue pretraining "
            "from: give its base model, or a checkpoint of a full fine-tune (model.lora_rank: 0)"
        )
    check_pipeline_folder(folder)
    return folder


def folder_architecture(folder: Path) -> dict[str, Any]:
    """The :class:`Config` architecture settings a saved shapes pipeline was built with, read from its components'
    JSON configs (no weights load)."""

    def read(name: str) -> dict[str, Any]:
        for fname in ("config.json", "scheduler_config.json"):
            f = folder / name / fname
            if f.is_file():
                try:
                    return json.loads(f.read_text(encoding="utf-8"))
                except ValueError as e:  # a cut or hand-edited file said only "Expecting value: line 1 ..."
                    raise ValueError(
                        f"{f} is damaged: not valid JSON ({e}); copy or save the model again"
                    ) from None
        raise FileNotFoundError(f"{folder / name} has no config.json")

    index = json.loads((folder / "model_index.json").read_text())
    if index.get("_class_name") != "StableDiffusion3Pipeline" or (index.get("text_encoder_3") or [None])[0]:
        raise ValueError(
            f"init_from={str(folder)!r} is not a shapes-architecture pipeline (a StableDiffusion3Pipeline without "
            "T5, as `imgalign world pretrain --component t2i` writes)"
        )
    tr, te, vae, sch = read("transformer"), read("text_encoder"), read("vae"), read("scheduler")
    return {
        "vae_channels": list(vae["block_out_channels"]),
        "vae_groups": vae["norm_num_groups"],
        "text_width": te["hidden_size"],
        "text_layers": te["num_hidden_layers"],
        "max_length": te["max_position_embeddings"],
        "layers": tr["num_layers"],
        "heads": tr["num_attention_heads"],
        "patch": tr["patch_size"],
        "shift": float(sch.get("shift", 1.0)),
    }


def json_form(cfg: Config) -> dict[str, Any]:
    """`cfg` as its JSON file reads back: a tuple (an in-process caller's vae_channels) compares as a list."""
    return json.loads(json.dumps(dataclasses.asdict(cfg)))


def check_init_from(cfg: Config) -> Path | None:
    """Before any model loads: the folder `cfg.init_from` names, complete and of `cfg`'s architecture (None when
    unset). A mismatch names every differing setting."""
    if not cfg.init_from:
        return None
    try:
        folder = init_folder(cfg.init_from)
    except FileNotFoundError as e:  # an IncompleteModelError stays one
        raise type(e)(f"init_from={cfg.init_from!r}: {e}") from None
    except ValueError as e:  # (json.JSONDecodeError's and UnicodeDecodeError's constructors take more than a
        # message: type(e)(message) was a TypeError about them)
        raise ValueError(f"init_from={cfg.init_from!r}: {e}") from None
    arch = folder_architecture(folder)
    ours = json_form(cfg)
    diff = {k: (v, ours[k]) for k, v in arch.items() if v != ours[k]}
    if diff:
        listed = ", ".join(f"{k}: model {m}, config {c}" for k, (m, c) in diff.items())
        fix = " ".join(f"--set {k}={json.dumps(m, separators=(',', ':'))}" for k, (m, _) in diff.items())
        raise ValueError(
            f"init_from={cfg.init_from!r} was built with other architecture settings ({listed}); set them as the "
            f"model has them: {fix}"
        )
    return folder


# ---- components -----------------------------------------------------------------------------------------------
def build_vae(cfg: Config):
    from diffusers import AutoencoderKL

    ch = tuple(cfg.vae_channels)
    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 3,
        up_block_types=("UpDecoderBlock2D",) * 3,
        block_out_channels=ch,
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=cfg.vae_groups,
        sample_size=IMAGE_SIDE,
        mid_block_add_attention=False,
        scaling_factor=1.0,  # set from latent statistics after training
        shift_factor=0.0,
    )


def build_text_encoder(cfg: Config, tok, seed: int):
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    torch.manual_seed(seed)
    return CLIPTextModelWithProjection(
        CLIPTextConfig(
            vocab_size=len(tok),
            hidden_size=cfg.text_width,
            intermediate_size=4 * cfg.text_width,
            num_hidden_layers=cfg.text_layers,
            num_attention_heads=2,
            max_position_embeddings=cfg.max_length,
            projection_dim=cfg.text_width,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )
    )


def build_transformer(cfg: Config):
    from diffusers import SD3Transformer2DModel

    dim = 32 * cfg.heads
    return SD3Transformer2DModel(
        sample_size=LATENT_SIDE,
        patch_size=cfg.patch,
        in_channels=4,
        num_layers=cfg.layers,
        attention_head_dim=32,
        num_attention_heads=cfg.heads,
        joint_attention_dim=2 * cfg.text_width,
        caption_projection_dim=dim,
        pooled_projection_dim=2 * cfg.text_width,
        out_channels=4,
        pos_embed_max_size=LATENT_SIDE // cfg.patch,
    )


def build_scheduler(cfg: Config):
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=cfg.shift)


# ---- data -----------------------------------------------------------------------------------------------------
def render_dataset(n: int, seed: int, progress: bool) -> tuple[torch.Tensor, list[str]]:
    """`n` training renders as uint8 (n, 3, IMAGE_SIDE, IMAGE_SIDE) and their prompts (seeded)."""
    from imgalign import shapes as W
    from imgalign.prompts.shapes import sample_training_specs

    specs = sample_training_specs(n, seed)
    rng = random.Random(seed + 1)
    imgs = np.empty((n, IMAGE_SIDE, IMAGE_SIDE, 3), dtype=np.uint8)
    for i, s in enumerate(tqdm(specs, desc="rendering", disable=not progress)):
        imgs[i] = np.asarray(W.render(s, rng)[0])
    return torch.from_numpy(imgs).permute(0, 3, 1, 2).contiguous(), [s.prompt() for s in specs]


def to_unit(x: torch.Tensor) -> torch.Tensor:
    """uint8 images (B, 3, H, W) -> float in [-1, 1]."""
    return x.float() / 127.5 - 1


# ---- checkpoints ----------------------------------------------------------------------------------------------
def save_state(path: Path, state: dict[str, Any]) -> None:
    """The encoders' checkpoint writer (:func:`imgalign.pretrain.encoder_common.save_checkpoint`): whole or not at
    all, a write cut short named as such."""
    from imgalign.pretrain.encoder_common import save_checkpoint

    save_checkpoint(path, state)


def rng_state(gen: torch.Generator) -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "gen": gen.get_state()}


def set_rng_state(state: dict[str, Any], gen: torch.Generator) -> None:
    torch.set_rng_state(state["torch"])
    gen.set_state(state["gen"])


# ---- stage 1: autoencoder -------------------------------------------------------------------------------------
def train_vae(cfg: Config, work: Path, images: torch.Tensor, progress: bool) -> Any:
    vae = build_vae(cfg)
    final = work / "vae"
    if (final / "config.json").exists() and any(final.glob("*.safetensors")):
        from diffusers import AutoencoderKL

        return AutoencoderKL.from_pretrained(final)
    opt = torch.optim.AdamW(vae.parameters(), lr=cfg.vae_lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(cfg.seed + 11)
    ckpt = work / "vae-ckpt.pt"
    step = 0
    st = load_state(ckpt, required=("model", "opt", "step", "rng"))
    if st is not None:
        vae.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step = st["step"]
        set_rng_state(st["rng"], gen)
    vae.train()
    bar = tqdm(total=cfg.vae_steps, initial=step, desc="autoencoder", disable=not progress)
    while step < cfg.vae_steps:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, cfg.vae_lr, 100, cfg.vae_steps)
        idx = torch.randint(0, len(images), (cfg.vae_batch,), generator=gen)
        c = cfg.vae_crop
        ox, oy = (4 * int(v) for v in torch.randint(0, (IMAGE_SIDE - c) // 4 + 1, (2,), generator=gen))
        x = to_unit(images[idx][:, :, oy : oy + c, ox : ox + c])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
            post = vae.encode(x).latent_dist
            z = post.mean + post.std * torch.randn(post.mean.shape, generator=gen)
            if cfg.vae_noise > 0:
                z = z + decoder_noise(post.mean.detach(), cfg.vae_noise, gen)
            rec = vae.decode(z).sample
        rec = rec.float()
        kl = post.kl().mean()
        loss = recon_loss(rec, x, cfg.vae_fg_weight) + cfg.vae_kl * kl
        if cfg.vae_mix > 0:
            perm = torch.randperm(len(x), generator=gen)
            a = torch.rand(len(x), 1, 1, 1, generator=gen)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
                rec_mix = vae.decode(a * z + (1 - a) * z[perm]).sample
            loss = loss + cfg.vae_mix * recon_loss(
                rec_mix.float(), a * x + (1 - a) * x[perm], cfg.vae_fg_weight
            )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(vae.parameters(), 1.0)
        opt.step()
        step += 1
        bar.update()
        if step % 50 == 0:
            bar.set_postfix(loss=f"{loss.item():.4f}")
        if step % cfg.ckpt_every == 0 or step == cfg.vae_steps:
            save_state(
                ckpt,
                {"model": vae.state_dict(), "opt": opt.state_dict(), "step": step, "rng": rng_state(gen)},
            )
    bar.close()
    vae.eval()
    # latent statistics -> per-channel normalisation so that the transformer sees zero-mean, unit-variance latents
    with torch.no_grad():
        zs = torch.cat(
            [vae.encode(to_unit(images[i : i + 256])).latent_dist.mean for i in range(0, 4096, 256)]
        )
        rec = vae.decode(zs[:256]).sample
        err = (rec - to_unit(images[:256])).abs().mean().item()
    fold_latent_normalisation(vae, zs.mean((0, 2, 3)), zs.std((0, 2, 3)))
    with torch.no_grad():
        rec2 = vae.decode(vae.encode(to_unit(images[:256])).latent_dist.mean).sample
        err2 = (rec2 - to_unit(images[:256])).abs().mean().item()
    print(f"after per-channel latent normalisation: L1 {err2:.4f}")
    from imgalign.pretrain.encoder_common import exporting

    # written whole into vae.tmp, then moved into place: a kill mid-save leaves no half folder, a failed save no
    # vae.tmp (it was left until the next run)
    with exporting(final) as tmp:
        vae.save_pretrained(tmp)
    print(f"autoencoder: L1 reconstruction error {err:.4f}; latent mean {zs.mean():.3f} std {zs.std():.3f}")
    return vae


@torch.no_grad()
def fold_latent_normalisation(vae, mu: torch.Tensor, sigma: torch.Tensor) -> None:
    """Make latents zero-mean, unit-variance per channel by folding ``z' = (z - mu) / sigma`` into the
    encoder's ``quant_conv`` and its inverse into the decoder's ``post_quant_conv`` (both 1x1 convolutions), so the
    stock pipeline's scalar ``scaling_factor`` / ``shift_factor`` can be 1 / 0. mu, sigma: (C,).

    A single scalar scale left one channel at 1/10 of another's variance, and the transformer's errors in that
    channel decoded to colour blobs."""
    c = mu.numel()
    q, pq = vae.quant_conv, vae.post_quant_conv
    q.weight[:c] /= sigma.view(c, 1, 1, 1)  # mean rows
    q.bias[:c] = (q.bias[:c] - mu) / sigma
    q.bias[c:] -= 2 * torch.log(sigma)  # log-variance rows
    w = pq.weight[:, :, 0, 0].clone()  # (C_out, C_in)
    pq.bias += w @ mu
    pq.weight *= sigma.view(1, c, 1, 1)
    vae.register_to_config(scaling_factor=1.0, shift_factor=0.0)


@torch.no_grad()
def encode_latents(vae, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Posterior mean and std of every image, in the transformer's normalised latent space."""
    s, b = vae.config.scaling_factor, vae.config.shift_factor
    means, stds = [], []
    for i in range(0, len(images), 512):
        post = vae.encode(to_unit(images[i : i + 512])).latent_dist
        means.append((post.mean - b) * s)
        stds.append(post.std * s)
    return torch.cat(means), torch.cat(stds)


# ---- stage 2: transformer + text encoders ---------------------------------------------------------------------
def make_pipeline(vae, transformer, te1, te2, tok1, tok2, scheduler):
    from diffusers import StableDiffusion3Pipeline

    pipe = StableDiffusion3Pipeline(
        transformer=transformer,
        scheduler=scheduler,
        vae=vae,
        text_encoder=te1,
        tokenizer=tok1,
        text_encoder_2=te2,
        tokenizer_2=tok2,
        text_encoder_3=None,
        tokenizer_3=None,
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe


def quick_eval(
    pipe, metas: list[dict], images_per_prompt: int, seed: int, **kw
) -> tuple[float, dict[str, float]]:
    """Sample and judge `metas` in memory: (overall, per-task accuracy)."""
    from imgalign.eval.geneval import judge, summarize
    from imgalign.eval.shapes_detector import ShapesDetector
    from imgalign.sampling import generate, image_seed

    det = ShapesDetector()
    jobs = [(i, j) for i in range(len(metas)) for j in range(images_per_prompt)]
    imgs = generate(
        pipe, [metas[i]["prompt"] for i, _ in jobs], [image_seed(seed, i, j) for i, j in jobs], **kw
    )
    rows = [
        {"tag": metas[i]["tag"], "correct": judge(img, det(img), metas[i]).correct}
        for (i, _), img in zip(jobs, imgs)
    ]
    return summarize(rows)


def eval_subset(n: int) -> list[dict]:
    """`n` prompts of the shapes eval set, spread evenly over its tasks."""
    from imgalign.prompts.io import load_geneval_metadata
    from imgalign.prompts.shapes import EVAL_SET_PATH

    metas = load_geneval_metadata(EVAL_SET_PATH)
    stride = max(1, len(metas) // n)
    # the eval set is grouped by task; take every stride-th prompt
    return metas[::stride][:n]


def training_batch(
    lat_mean: torch.Tensor, lat_std: torch.Tensor, prompts: list[str], cfg: Config, gen: torch.Generator
) -> tuple[list[str], torch.Tensor, torch.Tensor, torch.Tensor]:
    """One transformer training batch drawn with `gen`: each image's latent (sampled from its encoder
    distribution, lat_mean/lat_std (N, C, H, W)) with its own prompt ("" with probability cfg_dropout).

    Returns the prompts (B), x_t and the velocity target v (B, C, H, W) and t (B,) in (0, 1)."""
    idx = torch.randint(0, len(prompts), (cfg.batch_size,), generator=gen)
    x0 = lat_mean[idx] + lat_std[idx] * torch.randn(lat_mean[idx].shape, generator=gen)
    drop = torch.rand(cfg.batch_size, generator=gen) < cfg.cfg_dropout
    batch_prompts = ["" if d else prompts[i] for d, i in zip(drop.tolist(), idx.tolist())]
    eps = torch.randn(x0.shape, generator=gen)
    t = logit_normal(cfg.batch_size, cfg.logit_mean, cfg.logit_std, gen)
    xt, v = flow_matching_pair(x0, eps, t)
    return batch_prompts, xt, v, t


def velocity_loss(
    transformer, xt: torch.Tensor, v: torch.Tensor, t: torch.Tensor, emb, pooled, bf16: bool
) -> torch.Tensor:
    """Flow-matching loss: MSE between the transformer's velocity at (x_t, t) and the target v. The SD3
    transformer takes the timestep scaled to [0, 1000] (t = 1 is pure noise, as the scheduler's sigmas)."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        pred = transformer(
            hidden_states=xt, encoder_hidden_states=emb, pooled_projections=pooled, timestep=t * 1000
        ).sample
    return F.mse_loss(pred.float(), v)


def read_work_json(path: Path, fix: str) -> dict[str, Any]:
    """A JSON object of the work folder; a damaged one (cut short, edited) is named, with `fix`. It said only
    "error: Expecting value: line 1 column 1 (char 0)", naming no file."""
    try:
        value = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        why = f"not valid JSON: {e}"
    else:
        if isinstance(value, dict):
            return value
        why = f"a JSON {type(value).__name__}, not an object"
    raise ValueError(f"{path} is damaged ({why}); {fix}")


@restores_torch_threads
def pretrain(cfg: Config, out_dir: Path, progress: bool = True) -> dict[str, float]:
    """Train the autoencoder, then the transformer and text encoders; write ``out_dir/shapes-t2i``."""
    from diffusers.training_utils import EMAModel

    from imgalign.pretrain.tokenizer import save_tokenizer
    from imgalign.sampling import MAX_SEQUENCE_LENGTH

    cfg.validate()
    init = check_init_from(cfg)
    if cfg.t5_tokens != MAX_SEQUENCE_LENGTH:
        print(f"note: t5_tokens={cfg.t5_tokens} differs from imgalign.sampling.MAX_SEQUENCE_LENGTH")
    torch.set_num_threads(cfg.threads)
    t_start = time.time()
    out_dir = Path(out_dir)
    work = out_dir / WORK
    work.mkdir(parents=True, exist_ok=True)
    cfg_path = work / "config.json"
    cfg_dict = json_form(cfg)
    if cfg_path.exists():
        old = read_work_json(
            cfg_path,
            f"it records the config this run's checkpoints were written with: delete {work} to start over, "
            "or use another --out",
        )
        if old != cfg_dict:
            raise ValueError(
                f"{work} holds a run with a different config ({config_changes(old, cfg_dict)}); use another "
                "--out or delete that folder"
            )
    else:
        atomic_write_text(cfg_path, json.dumps(cfg_dict, indent=1))
    timing_path = work / "timing.json"
    # wall-clock seconds over every invocation of this run (resumes add up)
    timing = (
        read_work_json(timing_path, "delete it (it only adds up the run's wall-clock seconds) and run again")
        if timing_path.exists()
        else {}
    )
    base_seconds = float(timing.get("seconds", 0.0))

    def save_timing() -> float:
        seconds = base_seconds + time.time() - t_start
        atomic_write_text(timing_path, json.dumps({"seconds": seconds}))
        return seconds

    torch.manual_seed(cfg.seed)
    images, prompts = render_dataset(cfg.n_images, cfg.seed, progress)
    if init is None:
        vae = train_vae(cfg, work, images, progress)
        tok1 = save_tokenizer(work / "tokenizer", cfg.max_length)
        tok2 = save_tokenizer(work / "tokenizer_2", cfg.max_length)
        te1 = build_text_encoder(cfg, tok1, cfg.seed + 1)
        te2 = build_text_encoder(cfg, tok2, cfg.seed + 2)
        torch.manual_seed(cfg.seed + 3)
        transformer = build_transformer(cfg)
        scheduler = build_scheduler(cfg)
    else:  # every component from the model; its autoencoder stays as it is
        from imgalign.pipelines import load_pipeline

        src = load_pipeline(init)
        vae, transformer, scheduler = src.vae, src.transformer, src.scheduler
        te1, te2, tok1, tok2 = src.text_encoder, src.text_encoder_2, src.tokenizer, src.tokenizer_2
        print(f"continuing from {init}")
    vae.requires_grad_(False).eval()
    lat_mean, lat_std = encode_latents(vae, images)
    del images

    trained = [transformer, te1, te2]
    params = [p for m in trained for p in m.parameters()]
    n_params = sum(p.numel() for p in params)
    print(
        f"transformer {sum(p.numel() for p in transformer.parameters()) / 1e6:.2f}M params, text encoders "
        f"{sum(p.numel() for p in te1.parameters()) / 1e6:.2f}M x 2, autoencoder "
        f"{sum(p.numel() for p in vae.parameters()) / 1e6:.2f}M; {len(prompts)} training images; "
        f"batch {cfg.batch_size}, {cfg.steps} steps"
    )
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.99))
    ema = EMAModel(params, decay=cfg.ema)
    gen = torch.Generator().manual_seed(cfg.seed + 5)
    ckpt = work / "t2i-ckpt.pt"
    step = 0
    log_rows: list[dict] = []
    # the running sum of the losses since the last loss row (checkpointed: a resume keeps the row's window)
    loss_acc = 0.0
    st = load_state(ckpt, required=("models", "opt", "ema", "step", "rng", "log"))
    if st is not None:
        for m, sd in zip(trained, st["models"]):
            m.load_state_dict(sd)
        opt.load_state_dict(st["opt"])
        ema.load_state_dict(st["ema"])
        step = st["step"]
        set_rng_state(st["rng"], gen)
        log_rows = json.loads(st["log"])
        # older checkpoints lack it; with the default ckpt_every (500) they fall on the 50-step grid
        loss_acc = float(st.get("loss_acc", 0.0))
        print(f"resumed at step {step}")
    pipe = make_pipeline(vae, transformer, te1, te2, tok1, tok2, scheduler)
    metas = eval_subset(cfg.eval_prompts)

    def evaluate_ema(n_img: int) -> tuple[float, dict[str, float]]:
        ema.store(params)
        ema.copy_to(params)
        for m in trained:
            m.eval()
        try:
            return quick_eval(pipe, metas, n_img, seed=0)
        finally:
            ema.restore(params)
            for m in trained:
                m.train()

    for m in trained:
        m.train()
    bar = tqdm(total=cfg.steps, initial=step, desc="transformer", disable=not progress)
    while step < cfg.steps:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, cfg.lr, cfg.warmup, cfg.steps)
        batch_prompts, xt, v, t = training_batch(lat_mean, lat_std, prompts, cfg, gen)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
            emb, _, pooled, _ = pipe.encode_prompt(
                prompt=batch_prompts,
                prompt_2=None,
                prompt_3=None,
                do_classifier_free_guidance=False,
                max_sequence_length=cfg.t5_tokens,
                device=torch.device("cpu"),
            )
        loss = velocity_loss(transformer, xt, v, t, emb, pooled, cfg.bf16)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        ema.step(params)
        step += 1
        loss_acc += loss.item()
        bar.update()
        if step % LOSS_LOG_EVERY == 0:
            bar.set_postfix(loss=f"{loss_acc / LOSS_LOG_EVERY:.4f}", gn=f"{gn:.2f}")
            log_rows.append({"step": step, "loss": loss_acc / LOSS_LOG_EVERY})
            loss_acc = 0.0
        if cfg.eval_every and step % cfg.eval_every == 0 and step < cfg.steps:
            overall, tasks = evaluate_ema(1)
            log_rows.append(
                {"step": step, "quick_eval": overall, **{f"task/{k}": v for k, v in tasks.items()}}
            )
            tqdm.write(f"step {step}: quick eval overall {overall:.3f} {json.dumps(tasks)}")
        if step % cfg.ckpt_every == 0 or step == cfg.steps:
            save_state(
                ckpt,
                {
                    "models": [m.state_dict() for m in trained],
                    "opt": opt.state_dict(),
                    "ema": ema.state_dict(),
                    "step": step,
                    "rng": rng_state(gen),
                    "log": json.dumps(log_rows),
                    "loss_acc": loss_acc,
                },
            )
            save_timing()
    bar.close()

    # ship the EMA weights
    ema.copy_to(params)
    for m in trained:
        m.eval()
    folder = out_dir / FOLDER
    from imgalign.pipelines import quiet_absent_components
    from imgalign.pretrain.encoder_common import exporting

    # model_index.json declares T5 absent (diffusers would warn about it); the old folder is removed only once the
    # new one is in place
    with quiet_absent_components(), exporting(folder) as tmp:
        # shards of at most 4 MB keep every shipped file small for git; diffusers reads the index transparently
        pipe.save_pretrained(tmp, safe_serialization=True, max_shard_size="4MB")
    metrics: dict[str, float] = {"train_seconds": save_timing(), "params": float(n_params)}
    if cfg.final_eval_images:
        from imgalign.pipelines import load_pipeline
        from imgalign.prompts.io import load_geneval_metadata
        from imgalign.prompts.shapes import EVAL_SET_PATH

        shipped = load_pipeline(folder)
        overall, tasks = quick_eval(
            shipped, load_geneval_metadata(EVAL_SET_PATH), cfg.final_eval_images, seed=0
        )
        metrics["shapes_overall"] = overall
        metrics.update({f"shapes/{k}": v for k, v in tasks.items()})
    metrics["total_seconds"] = save_timing()
    write_card(folder, cfg, metrics, log_rows)
    return metrics


def write_card(folder: Path, cfg: Config, metrics: dict[str, float], log_rows: list[dict]) -> None:
    from imgalign.sampling import GUIDANCE_SCALE, NUM_INFERENCE_STEPS

    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    evals = [r for r in log_rows if "quick_eval" in r]
    lines = [
        "# shapes-t2i: a tiny StableDiffusion3Pipeline for the shapes world",
        "",
        "Stock `diffusers.StableDiffusion3Pipeline` (no T5): `SD3Transformer2DModel`, `AutoencoderKL`"
        f" ({IMAGE_SIDE}x{IMAGE_SIDE} RGB -> {LATENT_SIDE}x{LATENT_SIDE}x4), `FlowMatchEulerDiscreteScheduler`,"
        " two `CLIPTextModelWithProjection` encoders with a CLIP BPE"
        " tokenizer whose vocabulary is the shapes world. Load with",
        "`StableDiffusion3Pipeline.from_pretrained(folder, text_encoder_3=None, tokenizer_3=None)` or `imgalign.pipelines.load_pipeline('shapes')`.",
        "",
        f"Sample with `max_sequence_length={cfg.t5_tokens}` (the zero 'T5' tokens it was trained with),"
        f" {NUM_INFERENCE_STEPS} steps, guidance scale {GUIDANCE_SCALE}, {IMAGE_SIDE}x{IMAGE_SIDE}"
        " (`imgalign.sampling.generate` does).",
        "",
        "## Training",
        "",
        f"- command: {card_command(cfg, 't2i', f'; seed {cfg.seed}')}; folder written to `DIR/{FOLDER}`",
        f"- data: {cfg.n_images} renders of `imgalign.prompts.shapes.sample_training_specs({cfg.n_images}, "
        f"seed={cfg.seed})` (held-out colour x shape pairs never named in a training prompt)",
        (
            f"- continued from `{cfg.init_from}`: its autoencoder, frozen; its"
            if cfg.init_from
            else f"- autoencoder: {cfg.vae_steps} steps, batch {cfg.vae_batch}, latent-mixing weight {cfg.vae_mix},"
            f" decoder noise {cfg.vae_noise};"
        )
        + f" transformer + text encoders: {cfg.steps} steps, batch {cfg.batch_size}, patch"
        f" {cfg.patch} ({(LATENT_SIDE // cfg.patch) ** 2} image tokens), AdamW lr {cfg.lr} (warm-up {cfg.warmup},"
        f" cosine to {LR_FLOOR:.0%}), logit-normal t, CFG dropout {cfg.cfg_dropout}, EMA {cfg.ema} (shipped)",
        f"- {int(metrics['params'])} trained parameters; folder size {size / 1e6:.1f} MB",
        f"- run time: {metrics['train_seconds'] / 60:.0f} min to the shipped weights, {metrics['total_seconds'] / 60:.0f}"
        f" min with the final evaluation (wall clock, {cfg.threads} torch thread(s) on a shared 2-core machine)",
        "",
        "## Metrics",
        "",
    ]
    if "shapes_overall" in metrics:
        lines.append(
            f"Shapes suite (`imgalign eval --suite shapes --model DIR --images-per-prompt {cfg.final_eval_images} "
            "--out EVAL_DIR`,"
            f" seed 0, DIR this folder; `shapes` for the embedded model): overall **{metrics['shapes_overall']:.3f}**"
        )
        lines.append("")
        lines.append("| task | accuracy |")
        lines.append("|---|---|")
        for k, v in metrics.items():
            if k.startswith("shapes/"):
                lines.append(f"| {k[7:]} | {v:.3f} |")
    if evals:
        lines += [
            "",
            f"Quick evaluations during training ({cfg.eval_prompts} prompts, 1 image each, EMA weights):",
            "",
        ]
        lines += [f"- step {r['step']}: {r['quick_eval']:.3f}" for r in evals]
    (folder / "README.md").write_text("\n".join(lines) + "\n")

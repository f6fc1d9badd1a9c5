"""Contrastive pretraining of the embedded ``shapes-clip`` model: a tiny open_clip CLIP (ModifiedResNet image
tower by default, or a ViT; a transformer text tower).

The architecture is an open_clip model config (JSON, registered with ``open_clip.add_model_config`` under
:data:`MODEL_NAME`) and the text side uses open_clip's own BPE tokenizer, so the shipped folder loads with the stock
calls::

    open_clip.create_model_and_transforms("local-dir:" + folder)
    open_clip.add_model_config(folder + "/" + MODEL_NAME + ".json")
    open_clip.create_model_and_transforms(MODEL_NAME, pretrained=folder + "/open_clip_model.safetensors")

Data: shapes-world training prompts (:func:`imgalign.prompts.shapes.sample_training_specs`) rendered at 64x64; each
image is paired with one of four captions (its GenEval prompt, a full caption naming every object's colour and
shape, a shape-only or a colour-only caption), see :func:`imgalign.pretrain.encoder_common.captions`. Identical captions in a
batch are treated as positives of each other (:func:`multi_positive_clip_loss`), not as false negatives.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from imgalign import shapes as W
from imgalign.config import field
from imgalign.pretrain import card_command, restores_torch_threads
from imgalign.pretrain import encoder_common as C

MODEL_NAME = "shapes-clip-tiny"
"""The open_clip config name of the embedded shapes CLIP (the registry JSON shipped next to the weights)."""
FOLDER = "shapes-clip"
WORK = f"{FOLDER}.train"  # checkpoints and caches; the same command resumes from it
WEIGHTS = "open_clip_model.safetensors"
SHAPE_TEMPLATE = "a photo of a {}"
COLOUR_TEMPLATE = "a photo of a {} object"
# OpenAI CLIP's normalisation (open_clip's default), stored in the folder's preprocess_cfg
MEAN = (0.48145466, 0.4578275, 0.40821073)
STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass
class Config:
    seed: int = field(0, help="seed of the weights' initialisation and of the training data stream")
    steps: int = field(
        2000,
        help="optimizer steps (600 already give zero-shot 1.00; relations and colour binding need the rest)",
    )
    batch_size: int = field(64, help="image-caption pairs per step (the contrastive batch)")
    pool_size: int = field(8192, help="training renders, drawn once (seeded) and sampled into batches")
    caption_weights: tuple[float, ...] = field(
        (0.5, 0.35, 0.1, 0.05),
        help="probabilities of the caption kinds prompt, full (colour+shape), shapes-only, colours-only; the "
        "GenEval prompt (relations, colour binding) and the full caption get most of the weight: with "
        "(0.3, 0.3, 0.3, 0.1) and 600 steps true-vs-corrupted prompt accuracy was 0.938 (relation 0.56, colour swap "
        "0.33), with these weights and 2000 steps 0.958 (0.67, 0.56)",
    )
    lr: float = field(2e-3, help="peak AdamW learning rate (linear warm-up, cosine decay to 10%)")
    warmup: int = field(100, help="warm-up steps")
    weight_decay: float = field(
        0.05, help="AdamW weight decay on matrices (not on norms, biases, embeddings)"
    )
    embed_dim: int = field(64, help="joint embedding width")
    vision_arch: str = field(
        "resnet",
        help="image tower: resnet (open_clip's ModifiedResNet: conv stem, 4 bottleneck stages, attention pooling) "
        "or vit. A tiny ViT learns shape from scratch far more slowly than a conv net: after 800 steps on one "
        "thread its zero-shot shape accuracy was 0.49 (colour 1.00)",
    )
    vision_width: int = field(12, help="ResNet base width (stage widths 1x..8x, x4 bottleneck) or ViT width")
    vision_layers: int = field(1, help="ResNet blocks per stage (4 stages) or ViT blocks")
    vision_head_width: int = field(
        32, help="attention head width of the ResNet's attention pool or of the ViT"
    )
    patch_size: int = field(8, help="ViT only: patch size in pixels (64 px images: (64/patch)^2 tokens)")
    text_width: int = field(
        32,
        help="text transformer width (its 49408-token embedding dominates the size; 32 keeps the fp16 file under "
        "5 MB, and matched width 48 on zero-shot and true-vs-corrupted accuracy)",
    )
    text_layers: int = field(3, help="text transformer blocks")
    text_heads: int = field(2, help="text transformer heads")
    context_length: int = field(24, help="text tokens incl. start/end (the longest shapes caption needs 20)")
    eval_every: int = field(
        200, help="evaluate zero-shot accuracy every this many steps (0: only at the end)"
    )
    eval_images: int = field(240, help="held-out single-object renders for the zero-shot evaluation")
    checkpoint_every: int = field(100, help="write the resumable training checkpoint every this many steps")
    save_dtype: str = field(
        "float16", help="dtype of the shipped weights: float16 (halves the size) or float32"
    )
    threads: int = field(1, help="torch CPU threads")

    def validate(self) -> None:
        from imgalign.config import check_seed
        from imgalign.pretrain.encoder_common import (
            check_at_least,
            check_caption_weights,
            check_rates,
            check_weights,
        )

        check_seed("seed", self.seed)
        # sizes of 0 were a ZeroDivisionError traceback (heads) or a model built with nothing in it
        sizes = ("embed_dim", "vision_width", "vision_layers", "vision_head_width", "patch_size")
        check_at_least(self, 1, *sizes, "text_width", "text_layers", "text_heads")
        if self.steps < 1 or self.batch_size < 2:
            raise ValueError(
                f"clip: steps must be >= 1 and batch_size >= 2 (a contrastive batch needs pairs); got steps="
                f"{self.steps}, batch_size={self.batch_size}"
            )
        if self.pool_size < self.batch_size:
            raise ValueError("clip: pool_size must be at least batch_size")
        check_caption_weights(self, "clip")
        check_at_least(self, 1, "eval_images", "checkpoint_every", "threads")
        # (as t2i: a warm-up of -1 trained with none and eval_every=-2 evaluated every 2 steps, silently)
        check_at_least(self, 0, "warmup", "eval_every")
        check_rates(self, "lr")
        check_weights(self, "weight_decay")
        if self.vision_arch not in ("resnet", "vit"):
            raise ValueError(f"clip: vision_arch must be resnet or vit, got {self.vision_arch!r}")
        if self.vision_arch == "vit" and W.IMAGE_SIZE % self.patch_size:
            raise ValueError(f"clip: patch_size must divide the image size {W.IMAGE_SIZE}")
        pool_width = self.vision_width * 32 if self.vision_arch == "resnet" else self.vision_width
        if pool_width % self.vision_head_width or self.text_width % self.text_heads:
            raise ValueError(
                f"clip: widths must be multiples of the head width / number of heads; got vision pool width "
                f"{pool_width} over vision_head_width={self.vision_head_width}, text_width={self.text_width} over "
                f"text_heads={self.text_heads}"
            )
        if self.save_dtype not in ("float16", "float32"):
            raise ValueError("clip: save_dtype must be float16 or float32")
        if self.context_length < 20:
            raise ValueError("clip: context_length must be at least 20 (the longest shapes caption's tokens)")


def model_config(cfg: Config) -> dict[str, Any]:
    """The open_clip model config (the ``model_cfg`` of ``open_clip_config.json``)."""
    vision: dict[str, Any] = {
        "image_size": W.IMAGE_SIZE,
        "width": cfg.vision_width,
        "head_width": cfg.vision_head_width,
    }
    if cfg.vision_arch == "resnet":  # a list of stage depths selects open_clip's ModifiedResNet
        vision["layers"] = [cfg.vision_layers] * 4
    else:
        vision.update(layers=cfg.vision_layers, patch_size=cfg.patch_size)
    return {
        "embed_dim": cfg.embed_dim,
        "vision_cfg": vision,
        "text_cfg": {
            "context_length": cfg.context_length,
            "vocab_size": 49408,  # open_clip's SimpleTokenizer (BPE vocabulary shipped in the package)
            "width": cfg.text_width,
            "heads": cfg.text_heads,
            "layers": cfg.text_layers,
        },
    }


def preprocess_config() -> dict[str, Any]:
    return {
        "size": W.IMAGE_SIZE,
        "mode": "RGB",
        "mean": list(MEAN),
        "std": list(STD),
        "interpolation": "bicubic",
        "resize_mode": "shortest",
    }


def normalize(images_uint8):
    """(B, 3, H, W) uint8 -> float, normalised as the folder's preprocess does (for 64x64 inputs its resize and
    crop are identities, so this equals ``torch.stack([preprocess(pil) for pil in images])``)."""
    import torch

    x = images_uint8.float() / 255.0
    return (x - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)


def register(model_cfg: dict[str, Any], folder: Path) -> Path:
    """Write ``folder/MODEL_NAME.json`` and register it with open_clip; returns the JSON path."""
    import open_clip

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{MODEL_NAME}.json"
    path.write_text(json.dumps(model_cfg, indent=2) + "\n")
    open_clip.add_model_config(path)
    return path


def multi_positive_clip_loss(logits_per_image, same):
    """Symmetric InfoNCE (CLIP, Radford et al. 2021, Fig. 3) with several positives per row.

    logits_per_image: (B, B) scaled cosine similarities, image i vs text j. same: (B, B) bool, captions i and j
    are identical (the diagonal is True). Targets are uniform over each row's positives, so a duplicate caption
    is not pushed away as a negative; with all captions distinct this is exactly the CLIP loss.
    """
    import torch.nn.functional as F

    target = same.float() / same.float().sum(dim=1, keepdim=True)  # (B, B), rows sum to 1; symmetric support
    loss_i = F.cross_entropy(logits_per_image, target)  # images -> texts
    loss_t = F.cross_entropy(logits_per_image.t(), target.t())  # texts -> images
    return (loss_i + loss_t) / 2


def batch_loss(model, x, tok, texts: list[str]):
    """The CLIP training loss of one batch: images x (B, 3, H, W) normalised, tok (B, L) the tokenised
    `texts`, image i paired with text i; a scalar."""
    f_img = model.encode_image(x, normalize=True)  # (B, D)
    f_txt = model.encode_text(tok, normalize=True)  # (B, D)
    logits = model.logit_scale.exp() * f_img @ f_txt.t()  # (B, B)
    return multi_positive_clip_loss(logits, same_caption_matrix(texts))


def same_caption_matrix(texts: list[str]):
    """(B, B) bool: texts[i] == texts[j]."""
    import torch

    ids = {t: i for i, t in enumerate(dict.fromkeys(texts))}
    v = torch.tensor([ids[t] for t in texts])
    return v[:, None] == v[None, :]


def heldout_single_objects(n: int, seed: int) -> list[tuple[Any, str, str]]:
    """`n` held-out single-object renders: (image, shape, colour), shapes and colours cycled evenly."""
    import random

    rng = random.Random(C.heldout_seed(seed))
    out = []
    for i in range(n):
        shape = W.SHAPES[i % len(W.SHAPES)]
        spec = W.single_object(shape)
        img, objs = W.render(spec, rng)
        out.append((img, shape, objs[0].color))
    return out


def zero_shot_accuracy(
    model, preprocess, tokenizer, n: int = 240, seed: int = 0, device: str = "cpu"
) -> dict[str, float]:
    """Zero-shot shape and colour accuracy on `n` held-out single-object renders, prompts
    "a photo of a {shape}" and "a photo of a {colour} object"."""
    import torch

    data = heldout_single_objects(n, seed)
    dtype = next(model.parameters()).dtype
    with torch.no_grad():
        images = torch.stack([preprocess(img) for img, _, _ in data]).to(device, dtype)
        f_img = model.encode_image(images, normalize=True)
        res = {}
        for key, names, template, idx in (
            ("shape", W.SHAPES, SHAPE_TEMPLATE, 1),
            ("colour", tuple(W.COLORS), COLOUR_TEMPLATE, 2),
        ):
            f_txt = model.encode_text(
                tokenizer([template.format(c) for c in names]).to(device), normalize=True
            )
            pred = (f_img @ f_txt.t()).argmax(dim=1).tolist()
            res[f"zero_shot/{key}_acc"] = sum(names[p] == d[idx] for p, d in zip(pred, data)) / len(data)
    return res


def quiet_random_init() -> contextlib.AbstractContextManager[None]:
    """Drop open_clip's root-logger warning "No pretrained weights loaded ... Model initialized randomly" while the
    model to pretrain is built: pretraining starts from random weights on purpose (the warning read as a fault
    in every ``world pretrain`` log). Other records pass."""
    from imgalign.hub import dropping_root_records

    return dropping_root_records(
        lambda r: r.getMessage().startswith("No pretrained weights loaded for model")
    )


def _param_groups(model, weight_decay: float) -> list[dict[str, Any]]:
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.ndim < 2 or "embedding" in name or "logit_scale" in name or name.endswith("class_embedding"):
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def export(model, model_cfg: dict[str, Any], out: Path, save_dtype: str, card: str) -> None:
    """Write the open_clip folder (config, registry JSON, safetensors weights, model card) atomically."""
    import torch
    from safetensors.torch import save_file

    dt = torch.float16 if save_dtype == "float16" else torch.float32
    sd = {
        k: (v.detach().to(dt) if v.is_floating_point() else v.detach()).contiguous()
        for k, v in model.state_dict().items()
    }
    with C.exporting(out) as tmp:
        tmp.mkdir(parents=True)
        save_file(sd, str(tmp / WEIGHTS))
        cfg_json = {"model_cfg": model_cfg, "preprocess_cfg": preprocess_config()}
        (tmp / "open_clip_config.json").write_text(json.dumps(cfg_json, indent=2) + "\n")
        (tmp / f"{MODEL_NAME}.json").write_text(json.dumps(model_cfg, indent=2) + "\n")
        (tmp / "README.md").write_text(card)


def model_card(
    cfg: Config, metrics: dict[str, float], n_params: int, seconds: float, history: list[dict] | None = None
) -> str:
    lines = [
        "# shapes-clip",
        "",
        "A tiny open_clip CLIP (ModifiedResNet image tower by default, transformer text tower with open_clip's",
        "BPE tokenizer) trained contrastively on shapes-world renders (64x64) and captions. Part of imgalign's embedded models.",
        "Its image tower uses BatchNorm: call `model.eval()` before encoding (the loaders do).",
        "",
        "## Load",
        "```python",
        "import open_clip",
        'model, _, preprocess = open_clip.create_model_and_transforms("local-dir:" + folder)',
        'tokenizer = open_clip.get_tokenizer("local-dir:" + folder)',
        f'# or: open_clip.add_model_config(folder + "/{MODEL_NAME}.json")',
        f'#     open_clip.create_model_and_transforms("{MODEL_NAME}", pretrained=folder + "/{WEIGHTS}")',
        "# or: imgalign.shapes_models.load_shapes_clip()",
        "```",
        "",
        "## Training",
        f"- command: {card_command(cfg, 'clip', '; resumable')}",
        "- data: a pool of `pool_size` renders of `imgalign.prompts.shapes.sample_training_specs` (all six tasks;",
        "  held-out colour x shape pairs kept out of colour prompts), rendered by `imgalign.shapes.render`; each",
        "  step samples a batch and a caption per image (kind weights `caption_weights`): the GenEval prompt, a",
        "  full colour+shape caption, a shape-only caption or a colour-only caption. Batch = a pure function of (seed, step), so resuming replays the same data.",
        "- loss: symmetric InfoNCE with identical captions in a batch counted as positives.",
        f"- parameters: {n_params:,} (weights stored as {cfg.save_dtype})",
        f"- run time: {seconds / 60:.1f} min on this machine's CPU ({cfg.threads} torch thread(s), shared machine)",
        "",
        "Config:",
        "```",
        *[f"{k}: {v}" for k, v in asdict(cfg).items()],
        "```",
        "",
        "## Metrics (held-out renders, a seed stream separate from training)",
        f'Zero-shot over {cfg.eval_images} single-object renders, prompts "{SHAPE_TEMPLATE.format("{shape}")}" and',
        f'"{COLOUR_TEMPLATE.format("{colour}")}":',
        "",
        *[f"- {k}: {v:.4f}" for k, v in metrics.items()],
        "",
        *C.history_table(history or []),
        "Limits: trained only on exact renders of the shapes world (4 shapes, 6 colours, dark background); not a",
        "general-purpose CLIP.",
        "",
    ]
    return "\n".join(lines)


@restores_torch_threads
def pretrain(cfg: Config, out_dir: Path, progress: bool = True) -> dict[str, float]:
    """Train (resuming from ``out_dir/shapes-clip.train/checkpoint.pt``), write ``out_dir/shapes-clip``, return
    the final zero-shot metrics."""
    import open_clip
    import torch
    from tqdm.auto import tqdm

    cfg.validate()
    torch.set_num_threads(cfg.threads)
    out_dir = Path(out_dir)
    work = out_dir / WORK
    ckpt_path = work / "checkpoint.pt"
    state = C.resume_state(ckpt_path, cfg, "clip")  # a changed config fails before the model is built
    mcfg = model_config(cfg)
    register(mcfg, work)

    torch.manual_seed(cfg.seed)
    with quiet_random_init():
        model, _, preprocess = open_clip.create_model_and_transforms(MODEL_NAME, device="cpu")
    tokenizer = open_clip.get_tokenizer(MODEL_NAME)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(_param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.98), eps=1e-6)
    start, elapsed, history, loss_avg = 0, 0.0, [], None
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start, elapsed = int(state["step"]), float(state["elapsed"])
        history = json.loads(state["history"])
        loss_avg = state.get("loss_avg")  # the running loss average goes on where it stopped
    if progress:
        print(f"clip: {n_params:,} parameters, batch {cfg.batch_size}, steps {start}->{cfg.steps}")

    def evaluate() -> dict[str, float]:
        model.eval()
        m = zero_shot_accuracy(model, preprocess, tokenizer, cfg.eval_images, cfg.seed)
        model.train()
        return m

    pool = C.render_pool(cfg.seed, cfg.pool_size, progress=progress, desc="clip: rendering the training pool")
    model.train()
    t0 = time.time() - elapsed
    bar = tqdm(range(start, cfg.steps), desc="clip", disable=not progress, initial=start, total=cfg.steps)
    for step in bar:
        images, texts, _ = C.training_batch(pool, cfg.seed, step, cfg.batch_size, weights=cfg.caption_weights)
        x = normalize(images)  # (B, 3, 64, 64)
        tok = tokenizer(texts)  # (B, context_length)
        for g in opt.param_groups:
            g["lr"] = C.lr_at(step, cfg.steps, cfg.lr, cfg.warmup)
        loss = batch_loss(model, x, tok, texts)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():  # CLIP clamps the temperature at 100
            model.logit_scale.clamp_(0, 4.6052)
        loss_avg = loss.item() if loss_avg is None else 0.95 * loss_avg + 0.05 * loss.item()
        bar.set_postfix(loss=f"{loss_avg:.3f}", scale=f"{model.logit_scale.exp().item():.1f}")
        done = step + 1
        if cfg.eval_every and done % cfg.eval_every == 0 and done < cfg.steps:
            m = evaluate()
            history.append({"step": done, "train/loss": loss_avg, **m})
            bar.write(
                f"clip step {done}: loss {loss_avg:.3f} " + " ".join(f"{k} {v:.3f}" for k, v in m.items())
            )
        if done % cfg.checkpoint_every == 0 or done == cfg.steps:
            C.save_training_state(ckpt_path, model, opt, done, t0, cfg, history, loss_avg)
    metrics, elapsed = C.final_metrics(evaluate, loss_avg, t0, cfg.steps, history, work)
    export(
        model, mcfg, out_dir / FOLDER, cfg.save_dtype, model_card(cfg, metrics, n_params, elapsed, history)
    )
    return metrics

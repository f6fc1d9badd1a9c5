"""Captioning pretraining of the embedded ``shapes-vlm``: a tiny image-conditioned Llama in stock transformers
classes, with a word-level shapes-vocabulary tokenizer and a chat template. Two vision towers:

* ``resnet`` (default): ``FastVlmForConditionalGeneration`` with a timm ResNet (``test_resnet``, output stride 8:
  an 8x8 grid of feature tokens) through ``TimmWrapperModel``; conv features learn shape quickly.
* ``vit``: ``LlavaForConditionalGeneration`` with a ``CLIPVisionModel`` (patch 8, 64 tokens). From scratch on one
  CPU thread it learns colour, count and place but barely shape: 1500 steps gave pair accuracy 0.74 (shape 0.65).

The shipped folder loads with ``AutoModelForImageTextToText.from_pretrained`` and ``AutoProcessor.from_pretrained``.
Conversation format (the chat template)::

    <s><|user|><image>[ query]<|end|><|assistant|> {caption}<|end|>

Training is teacher-forced captioning: the loss is the cross-entropy of the assistant turn (caption tokens and the
closing ``<|end|>``). The caption is the GenEval prompt of the rendered spec or a full caption naming every object's
colour and shape (``caption_weights``), so the model scores prompts the way the
VLM log-likelihood rewards use it (SpectraReward / PromptEcho: mean log p of the prompt tokens given the image).
Evaluation: on held-out renders of the shapes evaluation set, the mean log-likelihood of the true prompt must beat
that of a corrupted prompt (colour, count, shape or relation changed; :func:`corrupt`).
"""

from __future__ import annotations

import json
import random
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from imgalign import shapes as W
from imgalign.config import field
from imgalign.pretrain import card_command, restores_torch_threads
from imgalign.pretrain import encoder_common as C

FOLDER = "shapes-vlm"
WORK = f"{FOLDER}.train"  # checkpoints and caches; the same command resumes from it
SPECIAL_TOKENS: tuple[str, ...] = (
    "<pad>",
    "<unk>",
    "<s>",
    "</s>",
    "<image>",
    "<|user|>",
    "<|assistant|>",
    "<|end|>",
)
QUERY = "describe this image."
EXTRA_WORDS: tuple[str, ...] = (
    "describe",
    "this",
    "image",
    "in",
    "detail",
    "what",
    "is",
    "the",
    "object",
    "objects",
)
PUNCTUATION: tuple[str, ...] = (".", "?", ",", ":")
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'user' %}<|user|>{% else %}<|assistant|>{% endif %}"
    "{% if message['content'] is string %} {{ message['content'] }}{% else %}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}<image>"
    "{% elif item['type'] == 'text' %} {{ item['text'] }}{% endif %}{% endfor %}{% endif %}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
MEAN = (0.48145466, 0.4578275, 0.40821073)
STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass
class Config:
    seed: int = field(0, help="seed of the weights' initialisation and of the training data stream")
    steps: int = field(1500, help="optimizer steps")
    batch_size: int = field(32, help="image-caption pairs per step")
    pool_size: int = field(8192, help="training renders, drawn once (seeded) and sampled into batches")
    lr: float = field(2e-3, help="peak AdamW learning rate (linear warm-up, cosine decay to 10%)")
    warmup: int = field(100, help="warm-up steps")
    weight_decay: float = field(0.01, help="AdamW weight decay")
    caption_weights: tuple[float, ...] = field(
        (0.5, 0.5, 0.0, 0.0),
        help="probabilities of the assistant caption kinds prompt (the spec's GenEval prompt), full (every "
        "object's colour and shape), shapes-only, colours-only; full captions put colour words in every "
        "example (with prompts alone, colour was the last thing learned: 0.55 pair accuracy after 1400 steps)",
    )
    query_prob: float = field(
        0.5, help=f"share of training examples whose user turn carries the query {QUERY!r} after the image"
    )
    vision_arch: str = field(
        "resnet", help="vision tower: resnet (FastVLM class, timm test_resnet) or vit (LLaVA class, CLIP ViT)"
    )
    vision_width: int = field(64, help="vit only: CLIP vision tower width")
    vision_layers: int = field(2, help="vit only: CLIP vision tower blocks")
    vision_heads: int = field(2, help="vit only: CLIP vision tower heads")
    patch_size: int = field(
        8, help="pixels per image token: the ViT patch size, or the ResNet output stride (8, 16 or 32)"
    )
    text_width: int = field(96, help="Llama hidden size")
    text_layers: int = field(2, help="Llama blocks")
    text_heads: int = field(4, help="Llama attention heads")
    text_kv_heads: int = field(2, help="Llama key/value heads (grouped-query attention)")
    text_ffn: int = field(256, help="Llama MLP width")
    eval_every: int = field(
        250, help="evaluate the true-vs-corrupted pair accuracy every this many steps (0: end)"
    )
    eval_pairs: int = field(
        360, help="held-out (image, true prompt, corrupted prompt) triples for the evaluation"
    )
    checkpoint_every: int = field(100, help="write the resumable training checkpoint every this many steps")
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
        sizes = ("vision_width", "vision_layers", "vision_heads", "patch_size", "text_width", "text_layers")
        check_at_least(self, 1, *sizes, "text_heads", "text_kv_heads", "text_ffn")
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError("vlm: steps and batch_size must be >= 1")
        if self.pool_size < self.batch_size:
            raise ValueError("vlm: pool_size must be at least batch_size")
        if self.vision_arch not in ("resnet", "vit"):
            raise ValueError(f"vlm: vision_arch must be resnet or vit, got {self.vision_arch!r}")
        if W.IMAGE_SIZE % self.patch_size:
            raise ValueError(f"vlm: patch_size must divide the image size {W.IMAGE_SIZE}")
        if self.vision_arch == "resnet" and self.patch_size not in (8, 16, 32):
            raise ValueError("vlm: with vision_arch=resnet, patch_size is the output stride: 8, 16 or 32")
        if self.vision_width % self.vision_heads or self.text_width % self.text_heads:
            raise ValueError(
                f"vlm: widths must be multiples of the number of heads; got vision_width={self.vision_width} over "
                f"vision_heads={self.vision_heads}, text_width={self.text_width} over text_heads={self.text_heads}"
            )
        if self.text_heads % self.text_kv_heads:
            raise ValueError("vlm: text_heads must be a multiple of text_kv_heads")
        check_caption_weights(self, "vlm")
        check_at_least(self, 1, "eval_pairs", "checkpoint_every", "threads")
        # (as t2i: a warm-up of -1 trained with none and eval_every=-2 evaluated every 2 steps, silently)
        check_at_least(self, 0, "warmup", "eval_every")
        check_rates(self, "lr")
        check_weights(self, "weight_decay")
        if not 0.0 <= self.query_prob <= 1.0:
            raise ValueError("vlm: query_prob must be in [0, 1]")


# ---- tokenizer, processor, model ----------------------------------------------------------------------------
def vocabulary() -> list[str]:
    """Special tokens, then every word of the shapes world's prompts and captions, then query words."""
    words = ["a", "an", "photo", "of", "and"]
    words += list(W.NUMBERS.values())
    words += [w for s in W.SHAPES for w in (s, W.PLURALS[s])]
    words += list(W.COLORS)
    words += [w for r in W.RELATIONS for w in r.split()]
    words += list(EXTRA_WORDS) + list(PUNCTUATION)
    return list(SPECIAL_TOKENS) + list(dict.fromkeys(words))


def build_tokenizer():
    """A word-level ``tokenizers`` model (lower-cased, split on whitespace and punctuation, unknown -> ``<unk>``)
    wrapped as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(vocabulary())}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.normalizer = normalizers.Lowercase()
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        extra_special_tokens={"image_token": "<image>"},
        model_max_length=128,
    )
    tok.add_special_tokens({"additional_special_tokens": ["<image>", "<|user|>", "<|assistant|>", "<|end|>"]})
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_processor(tokenizer, patch_size: int, vision_arch: str = "resnet"):
    from transformers import CLIPImageProcessor, LlavaProcessor

    ip = CLIPImageProcessor(
        size={"shortest_edge": W.IMAGE_SIZE},
        crop_size={"height": W.IMAGE_SIZE, "width": W.IMAGE_SIZE},
        image_mean=list(MEAN),
        image_std=list(STD),
    )
    return LlavaProcessor(
        image_processor=ip,
        tokenizer=tokenizer,
        patch_size=patch_size,
        # the ViT's CLS token is dropped ("default"); the ResNet grid has none ("full"): (64/patch)^2 tokens
        vision_feature_select_strategy="default" if vision_arch == "vit" else "full",
        num_additional_image_tokens=1 if vision_arch == "vit" else 0,
        chat_template=CHAT_TEMPLATE,
    )


def build_model(cfg: Config, tokenizer):
    from transformers import (
        CLIPVisionConfig,
        FastVlmConfig,
        FastVlmForConditionalGeneration,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        TimmWrapperConfig,
    )

    tc = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.text_width,
        intermediate_size=cfg.text_ffn,
        num_hidden_layers=cfg.text_layers,
        num_attention_heads=cfg.text_heads,
        num_key_value_heads=cfg.text_kv_heads,
        max_position_embeddings=128,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    n_img = (W.IMAGE_SIZE // cfg.patch_size) ** 2
    if cfg.vision_arch == "resnet":
        vc = TimmWrapperConfig(
            architecture="test_resnet",  # timm's tiny ResNet (stages 1,1,1,1; 96 output channels)
            model_args={"output_stride": cfg.patch_size},
            hidden_size=96,
            do_pooling=False,
            num_labels=0,
        )
        fc = FastVlmConfig(
            vision_config=vc,
            text_config=tc,
            image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
            image_seq_length=n_img,
            vision_feature_layer=-1,
            vision_feature_select_strategy="full",
            projector_hidden_act="gelu",
        )
        return FastVlmForConditionalGeneration(fc)
    vc = CLIPVisionConfig(
        hidden_size=cfg.vision_width,
        intermediate_size=4 * cfg.vision_width,
        num_hidden_layers=cfg.vision_layers,
        num_attention_heads=cfg.vision_heads,
        image_size=W.IMAGE_SIZE,
        patch_size=cfg.patch_size,
    )
    lc = LlavaConfig(
        vision_config=vc,
        text_config=tc,
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        image_seq_length=n_img,
        vision_feature_layer=-1,  # a 2-block tower: use its last layer
        vision_feature_select_strategy="default",
        projector_hidden_act="gelu",
    )
    return LlavaForConditionalGeneration(lc)


# ---- conversations and scoring -------------------------------------------------------------------------------
def conversation(caption: str, query: str | None = None) -> list[dict[str, Any]]:
    """User turn = image (+ query), assistant turn = the caption."""
    user: list[dict[str, Any]] = [{"type": "image"}]
    if query:
        user.append({"type": "text", "text": query})
    return [
        {"role": "user", "content": user},
        {"role": "assistant", "content": [{"type": "text", "text": caption}]},
    ]


def encode(processor, images: list, captions: list[str], queries: list[str | None] | None = None) -> dict:
    """Processor inputs for teacher forcing plus ``caption_mask`` (B, T): True on the caption's own tokens (after
    ``<|assistant|>``, before its closing ``<|end|>``) and ``target_mask``: caption tokens and that ``<|end|>``."""
    import torch

    queries = queries or [None] * len(captions)
    texts = [processor.apply_chat_template(conversation(c, q)) for c, q in zip(captions, queries)]
    enc = processor(images=images, text=texts, return_tensors="pt", padding=True)
    ids = enc["input_ids"]  # (B, T)
    tok = processor.tokenizer
    a_id, end_id = tok.convert_tokens_to_ids("<|assistant|>"), tok.convert_tokens_to_ids("<|end|>")
    pos = torch.arange(ids.shape[1])[None, :]  # (1, T)
    a_pos = (ids == a_id).int().argmax(dim=1, keepdim=True)  # (B, 1) the assistant marker
    after = pos > a_pos
    end_after = (ids == end_id) & after
    last = torch.where(end_after, pos, ids.shape[1]).min(dim=1, keepdim=True).values  # (B, 1) closing <|end|>
    enc["caption_mask"] = after & (pos < last)
    enc["target_mask"] = after & (pos <= last) & enc["attention_mask"].bool()
    return enc


def token_logprobs(model, enc: dict):
    """(B, T) log p(token_t | tokens_<t, image) for t >= 1 (column 0 is 0): one teacher-forced pass."""
    import torch

    out = model(
        input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], pixel_values=enc["pixel_values"]
    )
    logp = torch.log_softmax(out.logits[:, :-1].float(), dim=-1)  # (B, T-1, V)
    tgt = enc["input_ids"][:, 1:]  # (B, T-1)
    lp = logp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)  # (B, T-1)
    return torch.nn.functional.pad(lp, (1, 0))  # (B, T)


def caption_nll(model, enc: dict):
    """The training loss of one encoded batch: mean negative log-likelihood of the target tokens (the
    assistant turn and its closing <|end|>) given the image and the tokens before them; a scalar."""
    lp = token_logprobs(model, enc)  # (B, T)
    m = enc["target_mask"].float()
    return -(lp * m).sum() / m.sum()


def caption_loglik(model, processor, images: list, captions: list[str], query: str | None = None):
    """Mean log-likelihood of each caption's tokens given its image, excluding the end-of-turn token
    (SpectraReward / PromptEcho). Returns (B,) float32."""
    import torch

    enc = encode(processor, images, captions, [query] * len(captions))
    unk = processor.tokenizer.unk_token_id
    bad = [c for c, row in zip(captions, (enc["input_ids"] == unk) & enc["caption_mask"]) if row.any()]
    if bad:
        warnings.warn(
            f"{len(bad)} caption(s) have words outside the shapes-VLM vocabulary, scored as <unk> "
            f"(e.g. {bad[0]!r}); vocabulary: {' '.join(vocabulary()[len(SPECIAL_TOKENS) :])}",
            stacklevel=2,
        )
    with torch.no_grad():
        lp = token_logprobs(model, enc)
    m = enc["caption_mask"].float()
    return (lp * m).sum(1) / m.sum(1).clamp_min(1)


# ---- corruptions and the evaluation --------------------------------------------------------------------------
def corrupt(spec: W.Spec, rng: random.Random) -> tuple[W.Spec, str]:
    """A spec that the render of `spec` does not satisfy, and the kind of change: colour (a clause's colour),
    count (a counting clause's number), shape (a clause's shape, kept distinct from the other clause's) or
    relation (to its opposite; a diagonal layout can satisfy a non-opposite relation too)."""
    inc = list(spec.include)
    kinds = ["shape"]
    if any(c.color for c in inc):
        kinds.append("colour")
    if spec.tag == "counting":
        kinds.append("count")
    if spec.tag == "position":
        kinds.append("relation")
    kind = rng.choice(kinds)
    if kind == "shape":
        i = rng.randrange(len(inc))
        used = {c.shape for c in inc}
        new = rng.choice([s for s in W.SHAPES if s not in used])
        inc[i] = W.Clause(new, inc[i].count, inc[i].color, inc[i].position)
        exclude = tuple((new if s == spec.include[i].shape else s, n) for s, n in spec.exclude)
        return W.Spec(spec.tag, tuple(inc), exclude), kind
    if kind == "colour":
        i = rng.choice([k for k, c in enumerate(inc) if c.color])
        new = rng.choice([c for c in W.COLORS if c != inc[i].color])
        inc[i] = W.Clause(inc[i].shape, inc[i].count, new, inc[i].position)
        return W.Spec(spec.tag, tuple(inc), spec.exclude), kind
    if kind == "count":
        c = inc[0]
        n = rng.choice([k for k in (2, 3, 4) if k != c.count])
        return W.counting(c.shape, n), kind
    opposite = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}
    target, mover = inc
    assert mover.position is not None
    rel = opposite[mover.position[0]]
    return W.Spec(spec.tag, (target, W.Clause(mover.shape, mover.count, mover.color, (rel, 0)))), kind


def heldout_pairs(n: int, seed: int) -> list[tuple[Any, str, str, str]]:
    """`n` (image, true prompt, corrupted prompt, kind) from held-out renders of the shapes evaluation set."""
    from imgalign.prompts.shapes import build_eval_set

    specs = build_eval_set()
    rng = random.Random(C.heldout_seed(seed))
    order = list(range(len(specs)))
    rng.shuffle(order)
    out = []
    for k in range(n):
        spec = specs[order[k % len(order)]]
        img, _ = W.render(spec, rng)
        bad, kind = corrupt(spec, rng)
        out.append((img, spec.prompt(), bad.prompt(), kind))
    return out


def pair_accuracy(
    model, processor, n: int = 360, seed: int = 0, query: str | None = None, batch_size: int = 60
) -> dict[str, float]:
    """Share of held-out pairs where the true prompt's mean log-likelihood beats the corrupted one's (overall and
    per corruption kind), and the mean log-likelihood of true prompts."""
    data = heldout_pairs(n, seed)
    wins: dict[str, list[bool]] = {}
    true_ll = []
    for b in range(0, len(data), batch_size):
        chunk = data[b : b + batch_size]
        imgs = [d[0] for d in chunk]
        ll = caption_loglik(
            model, processor, imgs + imgs, [d[1] for d in chunk] + [d[2] for d in chunk], query
        )
        good, bad = ll[: len(chunk)], ll[len(chunk) :]
        for d, g, x in zip(chunk, good.tolist(), bad.tolist()):
            wins.setdefault(d[3], []).append(g > x)
            true_ll.append(g)
    allw = [w for v in wins.values() for w in v]
    res = {"pairs/accuracy": sum(allw) / len(allw)}
    res.update({f"pairs/{k}_acc": sum(v) / len(v) for k, v in sorted(wins.items())})
    res["pairs/true_loglik"] = sum(true_ll) / len(true_ll)
    return res


# ---- training ------------------------------------------------------------------------------------------------
def model_card(
    cfg: Config, metrics: dict[str, float], n_params: int, seconds: float, history: list[dict] | None = None
) -> str:
    lines = [
        "# shapes-vlm",
        "",
        "A tiny image-conditioned Llama in a stock transformers class (default: `FastVlmForConditionalGeneration`",
        "with a timm ResNet vision tower, an 8x8 grid of image tokens, a GELU MLP projector; `vision_arch=vit`:",
        "`LlavaForConditionalGeneration` with a CLIP ViT) and a word-level shapes-vocabulary tokenizer, trained as",
        "a captioner of shapes-world renders (64x64). The ResNet uses BatchNorm: call `model.eval()` before",
        "scoring (the loaders do). Part of imgalign's embedded models; scores prompts by their teacher-forced",
        "log-likelihood (VLM log-likelihood rewards).",
        "",
        "## Load",
        "```python",
        "from transformers import AutoModelForImageTextToText, AutoProcessor",
        "model = AutoModelForImageTextToText.from_pretrained(folder)",
        "processor = AutoProcessor.from_pretrained(folder)",
        "# or: imgalign.shapes_models.load_shapes_vlm()",
        "```",
        "Chat format: `<s><|user|><image>[ query]<|end|><|assistant|> caption<|end|>` (`processor.apply_chat_template`);",
        f"the optional query used in training is {QUERY!r}. Words outside the vocabulary map to `<unk>`.",
        "",
        "## Training",
        f"- command: {card_command(cfg, 'vlm', '; resumable')}",
        "- data: a pool of `pool_size` renders of `imgalign.prompts.shapes.sample_training_specs` (all six tasks;",
        "  held-out colour x shape pairs kept out of colour prompts), rendered by `imgalign.shapes.render`; the",
        "  assistant turn is the spec's GenEval prompt or a full caption naming every object's colour and shape",
        "  (kind weights `caption_weights`). Batch = a pure function of (seed, step).",
        "- loss: cross-entropy of the assistant turn (caption tokens and its closing `<|end|>`).",
        f"- parameters: {n_params:,} (float32); needs `timm` for the ResNet tower (an open_clip dependency)",
        f"- run time: {seconds / 60:.1f} min on this machine's CPU ({cfg.threads} torch thread(s), shared machine)",
        "",
        "Config:",
        "```",
        *[f"{k}: {v}" for k, v in asdict(cfg).items()],
        "```",
        "",
        "## Metrics (held-out renders of the shapes evaluation set, a seed stream separate from training)",
        f"{cfg.eval_pairs} (image, true prompt, corrupted prompt) triples; accuracy = share where the mean",
        "log-likelihood of the true prompt (caption tokens, end-of-turn excluded, no query) is higher. The",
        "corruption changes one colour, count, shape or relation (to its opposite).",
        "",
        *[f"- {k}: {v:.4f}" for k, v in metrics.items()],
        "",
        *C.history_table(history or []),
        "Limits: trained only on exact renders of the shapes world; not a general-purpose VLM.",
        "",
    ]
    return "\n".join(lines)


def export(model, processor, out: Path, card: str) -> None:
    """``save_pretrained`` model and processor into a temp folder, add the card, then move it into place."""
    with C.exporting(out) as tmp:
        model.save_pretrained(tmp)
        processor.save_pretrained(tmp)
        (tmp / "README.md").write_text(card)


@restores_torch_threads
def pretrain(cfg: Config, out_dir: Path, progress: bool = True) -> dict[str, float]:
    """Train (resuming from ``out_dir/shapes-vlm.train/checkpoint.pt``), write ``out_dir/shapes-vlm``, return
    the final held-out pair metrics."""
    import torch
    from PIL import Image
    from tqdm.auto import tqdm

    cfg.validate()
    torch.set_num_threads(cfg.threads)
    out_dir = Path(out_dir)
    work = out_dir / WORK
    ckpt_path = work / "checkpoint.pt"
    state = C.resume_state(ckpt_path, cfg, "vlm")  # a changed config fails before the model is built
    tokenizer = build_tokenizer()
    processor = build_processor(tokenizer, cfg.patch_size, cfg.vision_arch)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, tokenizer)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.98), weight_decay=cfg.weight_decay)
    start, elapsed, history, loss_avg = 0, 0.0, [], None
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start, elapsed = int(state["step"]), float(state["elapsed"])
        history = json.loads(state["history"])
        loss_avg = state.get("loss_avg")  # the running loss average goes on where it stopped
    if progress:
        print(f"vlm: {n_params:,} parameters, batch {cfg.batch_size}, steps {start}->{cfg.steps}")

    def evaluate() -> dict[str, float]:
        model.eval()
        m = pair_accuracy(model, processor, cfg.eval_pairs, cfg.seed)
        model.train()
        return m

    pool = C.render_pool(cfg.seed, cfg.pool_size, progress=progress, desc="vlm: rendering the training pool")
    model.train()
    t0 = time.time() - elapsed
    bar = tqdm(range(start, cfg.steps), desc="vlm", disable=not progress, initial=start, total=cfg.steps)
    for step in bar:
        idx, rng = C.batch_indices(cfg.seed, step, len(pool), cfg.batch_size)
        images = [Image.fromarray(pool.images[i].permute(1, 2, 0).numpy()) for i in idx]
        kinds = rng.choices(C.CAPTION_KINDS, weights=cfg.caption_weights, k=len(idx))
        caps = [pool.captions[i][k] for i, k in zip(idx, kinds)]
        queries = [QUERY if rng.random() < cfg.query_prob else None for _ in idx]
        enc = encode(processor, images, caps, queries)
        for g in opt.param_groups:
            g["lr"] = C.lr_at(step, cfg.steps, cfg.lr, cfg.warmup)
        loss = caption_nll(model, enc)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_avg = loss.item() if loss_avg is None else 0.95 * loss_avg + 0.05 * loss.item()
        bar.set_postfix(loss=f"{loss_avg:.3f}")
        done = step + 1
        if cfg.eval_every and done % cfg.eval_every == 0 and done < cfg.steps:
            mt = evaluate()
            history.append({"step": done, "train/loss": loss_avg, **mt})
            bar.write(
                f"vlm step {done}: loss {loss_avg:.3f} " + " ".join(f"{k} {v:.3f}" for k, v in mt.items())
            )
        if done % cfg.checkpoint_every == 0 or done == cfg.steps:
            C.save_training_state(ckpt_path, model, opt, done, t0, cfg, history, loss_avg)
    metrics, elapsed = C.final_metrics(evaluate, loss_avg, t0, cfg.steps, history, work)
    export(model, processor, out_dir / FOLDER, model_card(cfg, metrics, n_params, elapsed, history))
    return metrics

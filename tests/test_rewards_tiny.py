"""Tiny random models for the reward tests (saved to disk and loaded back through the libraries' own loaders),
and checks that the builders themselves produce loadable models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

TINY_CLIP_CFG = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 8},
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}


def make_tiny_open_clip(folder: Path, seed: int = 0, preprocess: dict | None = None) -> Path:
    """A random open_clip model saved as open_clip_config.json + open_clip_model.safetensors (the local-dir form);
    `preprocess`: other preprocess_cfg entries (resize_mode, interpolation)."""
    import open_clip
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    model = open_clip.CLIP(**TINY_CLIP_CFG)
    cfg = {
        "model_cfg": TINY_CLIP_CFG,
        "preprocess_cfg": {"mean": [0.5] * 3, "std": [0.25] * 3, **(preprocess or {})},
    }
    (folder / "open_clip_config.json").write_text(json.dumps(cfg))
    save_file(
        {k: v.contiguous() for k, v in model.state_dict().items()},
        str(folder / "open_clip_model.safetensors"),
    )
    return folder


def test_tiny_open_clip_loads(tmp_path: Path) -> None:
    from imgalign.rewards.clip import load_open_clip

    d = make_tiny_open_clip(tmp_path / "clip")
    model, tok, size, mean, std, _how = load_open_clip(f"local-dir:{d}", torch.device("cpu"), torch.float32)
    assert size == 32 and mean == (0.5, 0.5, 0.5)
    assert model.encode_image(torch.zeros(2, 3, 32, 32)).shape == (2, 16)
    assert tok(["a photo of a square"]).shape == (1, 16)


QWEN2_VL_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}<|im_start|>system\n"
    "You are a helpful assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n{% else %}"
    "{% for content in message['content'] %}{% if content['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] == 'text' %}{{ content['text'] }}"
    "{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
QWEN2_VL_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]


TINY_TEXT = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1
)
"""The text model size shared by the tiny VLMs of these tests."""


def byte_vocab() -> dict[str, int]:
    """A byte-level BPE vocabulary with no merges (every byte one token), for tiny tokenizers of real families."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {ch: i for i, ch in enumerate(bytes_to_unicode().values())}


def make_tiny_qwen2_vl(folder: Path, seed: int = 0) -> Path:
    """A random Qwen2-VL (2 layers, width 32) with a byte-level BPE tokenizer (no merges) and the Qwen2-VL chat
    template, saved with save_pretrained so AutoModelForImageTextToText / AutoProcessor load it offline."""
    from transformers import (
        Qwen2TokenizerFast,
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
        Qwen2VLImageProcessor,
        Qwen2VLProcessor,
        Qwen2VLVideoProcessor,
    )

    torch.manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    tok = Qwen2TokenizerFast(vocab=byte_vocab(), merges=[])
    tok.add_special_tokens({"additional_special_tokens": QWEN2_VL_SPECIALS[1:]})
    tok.add_special_tokens({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"})
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN2_VL_SPECIALS}
    image_proc = Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=56 * 56, patch_size=14, merge_size=2)
    proc = Qwen2VLProcessor(
        image_processor=image_proc,
        tokenizer=tok,
        video_processor=Qwen2VLVideoProcessor(),
        chat_template=QWEN2_VL_TEMPLATE,
    )
    cfg = Qwen2VLConfig(
        text_config={
            "vocab_size": len(tok),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "max_position_embeddings": 512,
            "rope_parameters": {"rope_type": "default", "mrope_section": [4, 2, 2], "rope_theta": 10000.0},
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
        },
        vision_config={
            "depth": 1,
            "embed_dim": 32,
            "hidden_size": 32,
            "num_heads": 2,
            "mlp_ratio": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    model = Qwen2VLForConditionalGeneration(cfg).eval()
    model.save_pretrained(folder)
    proc.save_pretrained(folder)
    return folder


def test_tiny_qwen2_vl_loads(tmp_path: Path) -> None:
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    d = make_tiny_qwen2_vl(tmp_path / "vlm")
    model = AutoModelForImageTextToText.from_pretrained(d)
    proc = AutoProcessor.from_pretrained(d)
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hi"}]}]
    text = proc.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    inputs = proc(text=[text], images=[Image.new("RGB", (64, 64))], return_tensors="pt")
    assert model(**inputs).logits.shape[:2] == inputs["input_ids"].shape


def make_tiny_dinov2(folder: Path, seed: int = 0) -> Path:
    """A random DINOv2 (1 layer, width 32, 32 px) with its image processor, saved with save_pretrained."""
    from transformers import BitImageProcessor, Dinov2Config, Dinov2Model

    torch.manual_seed(seed)
    cfg = Dinov2Config(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
    )
    Dinov2Model(cfg).eval().save_pretrained(folder)
    BitImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(
        folder
    )
    return folder


def test_feature_encoders_on_tiny_models(tmp_path: Path) -> None:
    from imgalign.rewards.features import build_features

    x = torch.rand(3, 3, 64, 64)
    dino = build_features(f"dinov2:{make_tiny_dinov2(tmp_path / 'dino')}")
    assert dino.dim == 32 and dino(x).shape == (3, 32)
    torch.testing.assert_close(dino(x), dino.tokens(x)[:, 0])  # the CLS token, not a pooled one
    torch.testing.assert_close(
        dino.tokens(x, batch_size=2), dino.tokens(x)
    )  # batches in order, each image once
    clip = build_features(f"open_clip:local-dir:{make_tiny_open_clip(tmp_path / 'clip')}")
    f = clip(x, batch_size=2)
    assert clip.dim == 16 and f.shape == (3, 16) and torch.isfinite(f).all()


def test_feature_encoders_are_cached_per_dtype(tmp_path: Path) -> None:
    """A bf16 request after an fp32 one builds its own encoder, not the cached fp32 one."""
    from imgalign.rewards.features import build_features

    name = f"open_clip:local-dir:{make_tiny_open_clip(tmp_path / 'clip')}"
    fp32, bf16 = build_features(name), build_features(name, dtype=torch.bfloat16)
    assert fp32.dtype == torch.float32 and bf16.dtype == torch.bfloat16
    # features come back float32 whatever the dtype
    assert bf16(torch.rand(2, 3, 32, 32)).dtype == torch.float32
    assert build_features(name) is fp32


def _dinov2_pixels(monkeypatch, folder: Path, x: torch.Tensor) -> torch.Tensor:
    """The pixel_values the dinov2: encoder of `folder` feeds its model for images x."""
    import transformers

    from imgalign.rewards.features import build_features

    seen: list[torch.Tensor] = []
    load = transformers.AutoModel.from_pretrained

    def hooked(*a, **k):
        model = load(*a, **k)
        model.register_forward_pre_hook(lambda m, args, kw: seen.append(kw["pixel_values"]), with_kwargs=True)
        return model

    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", hooked)
    build_features(f"dinov2:{folder}")(x)
    return seen[0]


@pytest.mark.parametrize(
    ("size", "crop", "h", "w", "out"),
    [
        ({"shortest_edge": 36}, True, 48, 64, (32, 32)),
        ({"shortest_edge": 36}, False, 64, 64, (36, 36)),
        ({"shortest_edge": 36}, False, 48, 64, (36, 48)),
        ({"height": 40, "width": 24}, False, 48, 64, (40, 24)),
    ],
    ids=[
        "resize 36 then crop 32",
        "no centre crop: the resized size",
        "no centre crop: the aspect kept",
        "a fixed height and width",
    ],
)
def test_dinov2_encoder_preprocesses_as_its_image_processor(
    tmp_path: Path, monkeypatch, size: dict[str, int], crop: bool, h: int, w: int, out: tuple[int, int]
) -> None:
    """A processor that resizes the shortest edge to 36 (bicubic) and centre-crops 32: on a 48 x 64 image the
    encoder's tensors match the processor's own output up to its 8-bit PIL round trip (a bilinear resize differs by
    ~0.12 on average, resizing straight to 32 by ~0.65). With do_center_crop=False the processor stops at the resize
    (its crop_size is unused): a square image reaches the model at 36 x 36, not resized to the crop size, and a
    48 x 64 one at 36 x 48, not cropped square; a processor with a fixed height and width squashes to it."""
    import numpy as np
    from transformers import BitImageProcessor

    from imgalign.rewards.base import to_pil

    folder = make_tiny_dinov2(tmp_path / "dino")
    proc = BitImageProcessor(size=size, crop_size={"height": 32, "width": 32}, do_center_crop=crop)
    proc.save_pretrained(folder)
    torch.manual_seed(0)
    pil = to_pil(torch.rand(1, 3, h, w))[0]
    xq = torch.from_numpy(np.asarray(pil, dtype=np.float32) / 255).permute(2, 0, 1)[None]
    ours = _dinov2_pixels(monkeypatch, folder, xq)
    ref = proc(pil, return_tensors="pt")["pixel_values"]
    assert ours.shape == ref.shape == (1, 3, *out) and float((ours - ref).abs().mean()) < 0.02


def test_dinov2_encoder_clamps_the_resize_overshoot_as_8_bit_pixels_do(tmp_path: Path, monkeypatch) -> None:
    """Beside a sharp edge the bicubic resize overshoots [0, 1]; the processor's uint8 images cannot, so the
    normalised pixels stay within [(0 - mean) / std, (1 - mean) / std]."""
    from transformers import BitImageProcessor

    folder = make_tiny_dinov2(tmp_path / "dino")
    proc = BitImageProcessor.from_pretrained(folder)
    x = torch.zeros(1, 3, 48, 64)
    x[..., 32:] = 1.0  # a step
    ours = _dinov2_pixels(monkeypatch, folder, x)
    m = torch.tensor(proc.image_mean).view(1, 3, 1, 1)
    s = torch.tensor(proc.image_std).view(1, 3, 1, 1)
    assert bool((ours >= -m / s - 1e-5).all()) and bool((ours <= (1 - m) / s + 1e-5).all())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"size": {"max_height": 40, "max_width": 40}},
            "has neither 'shortest_edge' nor 'height' and 'width'",
        ),
        ({"crop_size": {"longest_edge": 32}}, "its crop_size"),
    ],
)
def test_dinov2_processor_sizes_it_cannot_follow_are_named(
    tmp_path: Path, kwargs: dict[str, dict[str, int]], message: str
) -> None:
    """A processor size the encoder does not reproduce is refused naming the model, not read as another size."""
    import json

    from imgalign.rewards.features import build_features

    folder = make_tiny_dinov2(tmp_path / "dino")
    cfg_path = folder / "preprocessor_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.update(kwargs)
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=message):
        build_features(f"dinov2:{folder}")


def test_dinov2_register_tokens_are_dropped_from_the_patch_tokens(tmp_path: Path) -> None:
    """DINOv2 with 2 registers: last_hidden_state is CLS, 2 registers, 16 patches; tokens() is CLS then the 16
    patches."""
    from transformers import BitImageProcessor, Dinov2WithRegistersConfig, Dinov2WithRegistersModel

    from imgalign.rewards.features import build_features

    torch.manual_seed(0)
    cfg = Dinov2WithRegistersConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, image_size=32,
        patch_size=8, num_register_tokens=2,
    )  # fmt: skip
    model = Dinov2WithRegistersModel(cfg).eval()
    model.save_pretrained(tmp_path / "reg")
    proc = BitImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    proc.save_pretrained(tmp_path / "reg")
    x = torch.rand(2, 3, 32, 32)
    tok = build_features(f"dinov2:{tmp_path / 'reg'}").tokens(x)
    with torch.no_grad():
        h = model(pixel_values=proc(list(x), do_rescale=False, return_tensors="pt")["pixel_values"])
    h = h.last_hidden_state
    assert tok.shape == (2, 1 + 16, 32)
    assert torch.allclose(tok, torch.cat([h[:, :1], h[:, 3:]], 1), atol=1e-4)


LLAVA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'user' %}<|user|>{% else %}<|assistant|>{% endif %}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}<image>"
    "{% elif item['type'] == 'text' %} {{ item['text'] }}{% endif %}{% endfor %}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def make_tiny_llava(folder: Path, seed: int = 0) -> Path:
    """A random LLaVA (CLIP vision tower + Llama, width 32) with a word-level tokenizer over the shapes words."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
        PreTrainedTokenizerFast,
    )

    from imgalign import shapes as W

    torch.manual_seed(seed)
    specials = ["<pad>", "<unk>", "<s>", "</s>", "<image>", "<|user|>", "<|assistant|>", "<|end|>"]
    words = ["a", "an", "photo", "of", "and", "describe", "this", "image", "."] + list(W.NUMBERS.values())
    words += [w for s in W.SHAPES for w in (s, W.PLURALS[s])] + list(W.COLORS)
    words += [w for r in W.RELATIONS for w in r.split()]
    vocab = {w: i for i, w in enumerate(dict.fromkeys(specials + words))}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        extra_special_tokens={"image_token": "<image>"},
    )
    tok.add_special_tokens({"additional_special_tokens": specials[4:]})
    ip = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    proc = LlavaProcessor(
        image_processor=ip,
        tokenizer=tok,
        patch_size=8,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=LLAVA_TEMPLATE,
    )
    cfg = LlavaConfig(
        vision_config=CLIPVisionConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=32,
            patch_size=8,
        ),
        text_config=LlamaConfig(
            vocab_size=len(tok),
            **TINY_TEXT,
            max_position_embeddings=128,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        ),
        image_token_index=tok.convert_tokens_to_ids("<image>"),
        image_seq_length=16,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
    )
    LlavaForConditionalGeneration(cfg).eval().save_pretrained(folder)
    proc.save_pretrained(folder)
    return folder


def test_a_dinov2_encoder_that_does_not_load_is_named(tmp_path: Path) -> None:
    """dinov2:PATH of a missing folder, or of a folder that is no transformers model, raised transformers' own text
    (about internet connections, or a model_type key) naming no encoder; the error names it and what to give."""
    from imgalign.rewards.features import build_features

    (tmp_path / "pics").mkdir()
    for folder, reason in ((tmp_path / "nope", "no such folder"), (tmp_path / "pics", "")):
        with pytest.raises(ValueError, match=f"cannot load feature encoder 'dinov2:{folder}': {reason}"):
            build_features(f"dinov2:{folder}")

"""Tiny random models for the geneval-real tests (built from configs, saved and loaded back; no network).

Not a test module: the test files import these builders."""

from __future__ import annotations

import json
from pathlib import Path

import torch

SD3_SEED = 0


def write_clip_tokenizer(folder: Path, max_length: int = 16) -> Path:
    """A character-level CLIP BPE tokenizer (printable ASCII, no merges) in `folder`; returns the folder."""
    from transformers import CLIPTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    chars = [chr(i) for i in range(33, 127)]
    vocab: dict[str, int] = {}
    for c in chars + [c + "</w>" for c in chars] + ["<|startoftext|>", "<|endoftext|>"]:
        vocab[c] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    tok = CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), model_max_length=max_length)
    tok.save_pretrained(folder)
    return folder


def build_tiny_sd3(folder: Path, seed: int = SD3_SEED) -> Path:
    """A tiny random StableDiffusion3Pipeline (two CLIP text encoders, no T5) saved to `folder`."""
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        SD3Transformer2DModel,
        StableDiffusion3Pipeline,
    )
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, CLIPTokenizer

    torch.manual_seed(seed)
    tok_dir = write_clip_tokenizer(folder.parent / f".{folder.name}-tokenizer")
    tokenizer = CLIPTokenizer.from_pretrained(tok_dir)
    text_cfg = CLIPTextConfig(
        bos_token_id=len(tokenizer) - 2,
        eos_token_id=len(tokenizer) - 1,
        pad_token_id=len(tokenizer) - 1,
        hidden_size=8,
        intermediate_size=16,
        num_attention_heads=2,
        num_hidden_layers=2,
        vocab_size=len(tokenizer),
        max_position_embeddings=16,
        projection_dim=8,
    )
    transformer = SD3Transformer2DModel(
        sample_size=8,
        patch_size=1,
        in_channels=4,
        num_layers=1,
        attention_head_dim=4,
        num_attention_heads=2,
        caption_projection_dim=8,
        joint_attention_dim=16,
        pooled_projection_dim=16,
        out_channels=4,
    )
    vae = AutoencoderKL(
        sample_size=16,
        in_channels=3,
        out_channels=3,
        block_out_channels=(4,),
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=1,
        use_quant_conv=False,
        use_post_quant_conv=False,
        shift_factor=0.0609,
        scaling_factor=1.5035,
    )
    pipe = StableDiffusion3Pipeline(
        transformer=transformer,
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=vae,
        text_encoder=CLIPTextModelWithProjection(text_cfg),
        tokenizer=tokenizer,
        text_encoder_2=CLIPTextModelWithProjection(text_cfg),
        tokenizer_2=tokenizer,
        text_encoder_3=None,
        tokenizer_3=None,
    )
    pipe.save_pretrained(folder)
    return folder


def build_tiny_open_clip(folder: Path, seed: int = 0) -> Path:
    """A tiny random open_clip model in open_clip's local-dir layout (open_clip_config.json + safetensors)."""
    import open_clip
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    model_cfg = {
        "embed_dim": 8,
        "vision_cfg": {"image_size": 16, "layers": 1, "width": 16, "head_width": 8, "patch_size": 8},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 8, "heads": 2, "layers": 1},
    }
    folder.mkdir(parents=True, exist_ok=True)
    cfg = {
        "model_cfg": model_cfg,
        "preprocess_cfg": {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "size": 16},
    }
    (folder / "open_clip_config.json").write_text(json.dumps(cfg))
    model = open_clip.CLIP(**model_cfg)
    save_file(
        {k: v.contiguous() for k, v in model.state_dict().items()}, folder / "open_clip_model.safetensors"
    )
    return folder


# a few GenEval classes under the label spellings a COCO checkpoint uses ("mouse" for GenEval's "computer mouse")
TINY_DETR_LABELS = {0: "N/A", 1: "cat", 2: "dog", 3: "mouse", 4: "bench"}


def build_tiny_detr(folder: Path, seed: int = 0) -> Path:
    """A tiny random DetrForObjectDetection (ResNet backbone from a config) with its image processor."""
    from transformers import DetrConfig, DetrForObjectDetection, DetrImageProcessor, ResNetConfig

    torch.manual_seed(seed)
    cfg = DetrConfig(
        backbone_config=ResNetConfig(
            num_channels=3, embedding_size=8, hidden_sizes=[8, 8, 16, 16], depths=[1, 1, 1, 1],
            out_features=["stage4"],
        ),
        d_model=16, encoder_layers=1, decoder_layers=1, encoder_ffn_dim=16, decoder_ffn_dim=16,
        encoder_attention_heads=2, decoder_attention_heads=2, num_queries=12,
        id2label=TINY_DETR_LABELS, label2id={v: k for k, v in TINY_DETR_LABELS.items()},
    )  # fmt: skip
    model = DetrForObjectDetection(cfg).eval()
    with torch.no_grad():  # confident random predictions, so the tiny model's detections pass GenEval's 0.3
        model.class_labels_classifier.weight.mul_(40.0)
    model.save_pretrained(folder)
    DetrImageProcessor(size={"shortest_edge": 32, "longest_edge": 64}).save_pretrained(folder)
    return folder


def _tiny_owl(folder: Path, seed: int, version: str) -> Path:
    """A tiny random OWL detector (``v2``: OWLv2; ``v1``: OWL-ViT) with a character-level CLIP tokenizer and its
    processor."""
    import transformers as tf

    prefix = {"v2": "Owlv2", "v1": "OwlViT"}[version]
    torch.manual_seed(seed)
    tok = tf.CLIPTokenizer.from_pretrained(write_clip_tokenizer(folder.parent / f".{folder.name}-tokenizer"))
    n = len(tok)
    cfg = getattr(tf, f"{prefix}Config")(
        text_config=dict(
            vocab_size=n, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
            max_position_embeddings=16, bos_token_id=n - 2, eos_token_id=n - 1, pad_token_id=n - 1,
        ),
        vision_config=dict(
            hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=32,
            patch_size=8,
        ),
        projection_dim=16,
    )  # fmt: skip
    getattr(tf, f"{prefix}ForObjectDetection")(cfg).eval().save_pretrained(folder)
    size = {"height": 32, "width": 32}
    sizes = {"size": size} if version == "v2" else {"size": size, "crop_size": size}  # OWL-ViT centre-crops
    image_processor = getattr(tf, f"{prefix}ImageProcessor")(**sizes)
    getattr(tf, f"{prefix}Processor")(image_processor=image_processor, tokenizer=tok).save_pretrained(folder)
    return folder


def build_tiny_owlv2(folder: Path, seed: int = 0) -> Path:
    """A tiny random Owlv2ForObjectDetection (boxes relative to the square it pads the image to)."""
    return _tiny_owl(folder, seed, "v2")


def build_tiny_owlvit(folder: Path, seed: int = 0) -> Path:
    """A tiny random OwlViTForObjectDetection (OWL-ViT v1: boxes relative to the image)."""
    return _tiny_owl(folder, seed, "v1")


def build_tiny_mask2former(folder: Path, seed: int = 0) -> Path:
    """A tiny random Mask2FormerForUniversalSegmentation (Swin backbone from a config): instances with masks."""
    from transformers import (
        Mask2FormerConfig,
        Mask2FormerForUniversalSegmentation,
        Mask2FormerImageProcessor,
        SwinConfig,
    )

    torch.manual_seed(seed)
    labels = {0: "cat", 1: "dog", 2: "mouse", 3: "bench"}
    cfg = Mask2FormerConfig(
        backbone_config=SwinConfig(
            image_size=64, patch_size=4, embed_dim=8, depths=[1, 1, 1, 1], num_heads=[1, 1, 1, 1], window_size=2,
            out_features=["stage1", "stage2", "stage3", "stage4"],
        ),
        feature_size=32, mask_feature_size=32, hidden_dim=32, encoder_feedforward_dim=32, encoder_layers=1,
        decoder_layers=2, num_attention_heads=2, dim_feedforward=32, num_queries=6, common_stride=4,
        id2label=labels, label2id={v: k for k, v in labels.items()},
    )  # fmt: skip
    model = Mask2FormerForUniversalSegmentation(cfg).eval()
    with torch.no_grad():  # confident random class predictions, so some instances pass GenEval's 0.3
        model.class_predictor.weight.mul_(40.0)
    model.save_pretrained(folder)
    Mask2FormerImageProcessor(size={"height": 64, "width": 64}).save_pretrained(folder)
    return folder


def build_tiny_grounding_dino(folder: Path, seed: int = 0) -> Path:
    """A tiny random GroundingDinoForObjectDetection (ResNet + BERT from configs) with a word-level BERT vocab."""
    from transformers import (
        BertConfig,
        BertTokenizer,
        GroundingDinoConfig,
        GroundingDinoForObjectDetection,
        GroundingDinoImageProcessor,
        GroundingDinoProcessor,
        ResNetConfig,
    )

    torch.manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."]
    words += ["cat", "dog", "computer", "mouse", "bench", "giraffe", "red", "cup", "blue"]
    (folder / "vocab.txt").write_text("\n".join(words) + "\n")
    cfg = GroundingDinoConfig(
        backbone_config=ResNetConfig(
            num_channels=3, embedding_size=8, hidden_sizes=[8, 8, 16, 16], depths=[1, 1, 1, 1],
            out_features=["stage2", "stage3", "stage4"],
        ),
        text_config=BertConfig(
            vocab_size=len(words), hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16,
            max_position_embeddings=64,
        ),
        d_model=32, encoder_layers=1, decoder_layers=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
        encoder_attention_heads=2, decoder_attention_heads=2, num_queries=10, num_feature_levels=3,
        encoder_n_points=2, decoder_n_points=2, max_text_len=32,
    )  # fmt: skip
    GroundingDinoForObjectDetection(cfg).eval().save_pretrained(folder)
    proc = GroundingDinoProcessor(
        image_processor=GroundingDinoImageProcessor(size={"shortest_edge": 32, "longest_edge": 64}),
        tokenizer=BertTokenizer(str(folder / "vocab.txt")),
    )
    proc.save_pretrained(folder)
    return folder

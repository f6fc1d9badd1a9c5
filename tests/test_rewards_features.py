"""Feature encoders (rewards/features.py): what mutation round 11 found unchecked."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_rewards_tiny import make_tiny_dinov2

from imgalign.rewards.features import build_features


def test_dinov2_tokens_come_back_float32_whatever_the_dtype(tmp_path: Path) -> None:
    """A bf16 dinov2 encoder gives float32 CLS features and float32 patch tokens (the discriminator's head is
    float32), the tokens' CLS being the features."""
    enc = build_features(f"dinov2:{make_tiny_dinov2(tmp_path / 'dino')}", dtype=torch.bfloat16)
    x = torch.rand(2, 3, 32, 32)
    tok = enc.tokens(x)
    assert enc(x).dtype == tok.dtype == torch.float32 and tok.shape == (2, 1 + 16, 32)
    torch.testing.assert_close(tok[:, 0], enc(x))


def test_a_dinov2_path_with_a_colon_is_read_whole(tmp_path: Path) -> None:
    """Only the first ':' separates the encoder kind: a folder such as runs/step:100/dino is loaded, not cut at its
    own colon."""
    folder = make_tiny_dinov2(tmp_path / "step:100" / "dino")
    enc = build_features(f"dinov2:{folder}")
    assert enc.name == f"dinov2:{folder}" and enc(torch.rand(1, 3, 32, 32)).shape == (1, 32)


@pytest.mark.parametrize(
    ("resize_mode", "hw"),
    [("shortest", (142, 96)), ("shortest", (146, 96)), ("longest", (70, 96))],
    ids=["tall, crop margin 11.5", "tall, crop margin 12.5", "wide, odd pad 13"],
)
def test_preprocessing_places_odd_margins_as_open_clip(resize_mode: str, hw: tuple[int, int]) -> None:
    """The vertical offset of the centre crop and pad where the margin is odd: 142 x 96 resized to 71 x 48 crops
    int(round(11.5)) = 12 rows off the top, 146 x 96 (73 x 48) int(round(12.5)) = 12 (Python rounds half to even,
    as torchvision does), and 70 x 96 fitted into 48 (35 x 48) pads 13 // 2 = 6 rows above; a row off, the edge
    differs by far more than the 8-bit round trip."""
    import numpy as np
    import open_clip
    from open_clip.transform import PreprocessCfg, image_transform_v2

    from imgalign.rewards.base import to_pil
    from imgalign.rewards.features import clip_preprocess

    x = torch.zeros(1, 3, *hw)
    x[..., hw[0] // 2 :, :] = 1.0  # a horizontal edge: a row's shift moves it
    pil = to_pil(x)[0]
    xq = torch.from_numpy(np.asarray(pil, dtype=np.float32) / 255).permute(2, 0, 1)[None]
    mean, std = open_clip.OPENAI_DATASET_MEAN, open_clip.OPENAI_DATASET_STD
    cfg = PreprocessCfg(size=48, mean=mean, std=std, resize_mode=resize_mode, interpolation="bicubic")
    ref = image_transform_v2(cfg, is_train=False)(pil)[None]
    ours = clip_preprocess(xq, 48, mean, std, resize_mode, "bicubic")
    assert ours.shape == ref.shape and float((ours - ref).abs().max()) < 0.05


def test_stats_colour_histograms_are_per_channel_in_order() -> None:
    """Colour (0, 0.5, 1): red at the first bin centre, green halfway between bins 3 and 4, blue at the last one
    (centres k/7): each channel has its own histogram, red, green, blue."""
    from imgalign.rewards.features import image_stats

    x = torch.tensor([0.0, 0.5, 1.0]).view(1, 3, 1, 1).expand(1, 3, 8, 8)
    f = image_stats(x)[0]
    assert f[0:8].tolist() == pytest.approx([1.0] + [0.0] * 7, abs=1e-6)
    assert f[8:16].tolist() == pytest.approx([0.0, 0.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.0], abs=1e-6)
    assert f[16:24].tolist() == pytest.approx([0.0] * 7 + [1.0], abs=1e-6)


def test_clip_features_are_a_transformers_clips_projected_image_embedding(tmp_path: Path) -> None:
    """clip:FOLDER (a transformers CLIP, e.g. for FID in CLIP space): get_image_features of the normalised pixels,
    the folder recorded absolute; a folder of another model is refused naming open_clip:."""
    import os

    from transformers import CLIPImageProcessor, CLIPModel

    from imgalign.rewards.features import local_name
    from imgalign.trainers.testing import tiny_transformers_clip

    folder = tiny_transformers_clip(tmp_path / "clip")
    enc = build_features(f"clip:{folder}")
    x = torch.rand(3, 3, 32, 32)
    proc = CLIPImageProcessor.from_pretrained(folder)
    mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in (proc.image_mean, proc.image_std))
    with torch.no_grad():
        model = CLIPModel.from_pretrained(folder).eval()
        ref = model.get_image_features(pixel_values=(x - mean) / std).pooler_output
    assert enc.dim == 16 and enc(x).shape == (3, 16)
    torch.testing.assert_close(enc(x), ref, atol=1e-5, rtol=1e-5)
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        assert local_name("clip:clip") == f"clip:{folder}"
    finally:
        os.chdir(cwd)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text('{"model_type": "dinov2"}')
    with pytest.raises(
        ValueError, match=r"'clip:.*other': .* holds a transformers 'dinov2' model, not a CLIPModel"
    ):
        build_features(f"clip:{tmp_path / 'other'}")
    with pytest.raises(ValueError, match=r"'clip:.*nope': .* is no transformers CLIP .*use open_clip:NAME"):
        build_features(f"clip:{tmp_path / 'nope'}")


def test_a_dinov2_folder_whose_config_does_not_fit_its_weights_is_one_line(tmp_path: Path) -> None:
    """An edited config.json (hidden_size 48 over 32-wide weights) raised transformers' RuntimeError ("You set
    `ignore_mismatched_sizes` to `False`"), a traceback from every command; one line names the encoder."""
    import json

    folder = make_tiny_dinov2(tmp_path / "dino")
    config = folder / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "hidden_size": 48}))
    with pytest.raises(
        ValueError, match=r"feature encoder 'dinov2:.*dino': its weights do not fit the shapes its"
    ):
        build_features(f"dinov2:{folder}")


def test_the_processor_transform_resamples_as_the_processor_says() -> None:
    """A DINO v1 (``vit``) folder's ViTImageProcessor resamples bilinear; the pixels were bicubic's whatever it
    said, up to 0.25 from transformers' own (normalised units). Now within 8-bit rounding of them."""
    from PIL import Image
    from transformers import ViTImageProcessor

    from imgalign.rewards.features import image_processor_transform

    x8 = torch.randint(0, 256, (1, 3, 48, 40), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    pil = Image.fromarray(x8[0].permute(1, 2, 0).numpy())
    # bilinear; bicubic, whose overshoot PIL rounds to 8 bits
    for resample, within in ((2, 0.01), (3, 0.1)):
        proc = ViTImageProcessor(size={"height": 32, "width": 32}, resample=resample)
        ref = proc(images=pil, return_tensors="pt").pixel_values
        ours = image_processor_transform(proc, "vit", "cpu", torch.float32)(x8.float() / 255)
        assert (ours - ref).abs().max() < within, resample

"""rewards/features.py: the clip: and dinov2: encoders and the image processor's steps (mutation round 15 found
these unchecked)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_rewards_tiny import make_tiny_dinov2

from imgalign.rewards.features import build_features


def test_an_encoder_is_cached_per_dtype(tmp_path: Path) -> None:
    """The same dinov2 folder built in float32 and in bfloat16 is two encoders, each in its own dtype."""
    folder = make_tiny_dinov2(tmp_path / "dino")
    f32, bf16 = build_features(f"dinov2:{folder}"), build_features(f"dinov2:{folder}", dtype=torch.bfloat16)
    assert f32 is not bf16 and (f32.dtype, bf16.dtype) == (torch.float32, torch.bfloat16)
    assert build_features(f"dinov2:{folder}") is f32


def test_a_clip_path_with_a_colon_is_read_whole(tmp_path: Path) -> None:
    """Only the first ':' separates the encoder kind: clip:runs/step:100/clip is that folder."""
    from imgalign.trainers.testing import tiny_transformers_clip

    folder = tiny_transformers_clip(tmp_path / "step:100" / "clip")
    enc = build_features(f"clip:{folder}")
    assert enc.name == f"clip:{folder}" and enc(torch.rand(1, 3, 32, 32)).shape == (1, 16)


def test_an_image_processor_that_does_not_crop_keeps_the_aspect() -> None:
    """do_center_crop false: the shortest edge is resized and nothing is cut (a 48 x 64 image to 36 x 48)."""
    from transformers import BitImageProcessor

    from imgalign.rewards.features import image_processor_transform

    proc = BitImageProcessor(
        size={"shortest_edge": 36}, crop_size={"height": 32, "width": 32}, do_center_crop=False
    )
    assert image_processor_transform(proc, "x", "cpu", torch.float32)(torch.rand(2, 3, 48, 64)).shape == (
        2,
        3,
        36,
        48,
    )
    proc.do_center_crop = True
    assert image_processor_transform(proc, "x", "cpu", torch.float32)(torch.rand(2, 3, 48, 64)).shape == (
        2,
        3,
        32,
        32,
    )


def test_the_image_processors_steps_give_its_pixels_clamped_as_8_bit_values_are() -> None:
    """A hard black and white edge resized from 45 x 60 to 36 x 48 and cropped to 32: the processor's own pixels
    (its resize rounds to 8 bits, which cuts the bicubic overshoot at 0 and 255), up to that rounding."""
    from transformers import CLIPImageProcessor

    from imgalign.rewards.features import image_processor_transform

    proc = CLIPImageProcessor(size={"shortest_edge": 36}, crop_size={"height": 32, "width": 32})
    x = torch.zeros(1, 3, 45, 60)
    x[..., :, 29:] = 1.0
    x[..., 22:, :] = 1.0 - x[..., 22:, :]
    ref = proc((x[0] * 255).to(torch.uint8), return_tensors="pt")["pixel_values"]
    got = image_processor_transform(proc, "x", "cpu", torch.float32)(x)
    assert got.shape == ref.shape == (1, 3, 32, 32)
    assert float((got - ref).abs().max()) < 0.05


def test_dinov2_features_are_the_models_cls_on_its_processors_pixels(tmp_path: Path) -> None:
    """A 40 x 48 image: the CLS of transformers' own image processor (resize, crop, normalise) and model, up to the
    processor's 8-bit rounding after its resize."""
    from transformers import AutoModel, BitImageProcessor

    folder = make_tiny_dinov2(tmp_path / "dino")
    g = torch.Generator().manual_seed(0)
    x8 = (torch.rand(2, 3, 40, 48, generator=g) * 255).round().to(torch.uint8)
    pixels = BitImageProcessor.from_pretrained(folder)(list(x8), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        ref = AutoModel.from_pretrained(folder).eval()(pixel_values=pixels).last_hidden_state[:, 0]
    got = build_features(f"dinov2:{folder}")(x8.float() / 255)
    assert float((got - ref).abs().max()) < 0.05 < float(ref.abs().max())


def test_a_dinov2_folder_of_an_unknown_model_type_is_one_line(tmp_path: Path) -> None:
    """config.json with a model_type transformers does not know: one line naming the encoder, not its traceback."""
    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "no-such-model"}')
    with pytest.raises(ValueError, match=rf"cannot load feature encoder 'dinov2:{folder}'"):
        build_features(f"dinov2:{folder}")


def test_a_dinov2_config_with_an_activation_transformers_does_not_know_is_one_line(tmp_path: Path) -> None:
    """hidden_act edited to a name no activation has: before, a KeyError: 'nonsense' traceback."""
    import json

    folder = make_tiny_dinov2(tmp_path / "dino")
    config = folder / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "hidden_act": "nonsense"}))
    with pytest.raises(
        ValueError,
        match=rf"cannot load feature encoder 'dinov2:{folder}': its config.json fails transformers' checks "
        r"\(transformers knows no 'nonsense'\); if config.json was edited",
    ):
        build_features(f"dinov2:{folder}")


def test_a_nearest_resize_is_torchs_nearest_without_antialiasing() -> None:
    """mode nearest (an open_clip model whose interpolation is nearest): torch's own nearest resize; torch refuses
    align_corners and antialias for it, which the other modes take."""
    import torch.nn.functional as F

    from imgalign.rewards.features import clip_preprocess, resize

    x = torch.rand(2, 3, 20, 30)
    torch.testing.assert_close(resize(x, (8, 12), "nearest"), F.interpolate(x, size=(8, 12), mode="nearest"))
    got = clip_preprocess(x, 10, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), "squash", "nearest")
    torch.testing.assert_close(got, F.interpolate(x, size=(10, 10), mode="nearest"))

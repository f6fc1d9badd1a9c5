"""Round 23b mutation survivors of rewards/clip.py and rewards/features.py (s60_m2C)."""

from __future__ import annotations

from pathlib import Path

import torch
from test_rewards_tiny import make_tiny_open_clip

from imgalign.rewards.base import build_reward


def test_the_models_own_interpolation_reaches_the_reward_and_the_features(tmp_path: Path) -> None:
    """A model whose preprocess config resizes bilinear: the clip reward and the open_clip: feature encoder resize
    with it, not with the default bicubic."""
    from imgalign.rewards.features import build_features, clip_preprocess

    d = make_tiny_open_clip(tmp_path / "clip", preprocess={"interpolation": "bilinear"})
    r = build_reward(f"clip:model=local-dir:{d}")
    assert r.how == ("shortest", "bilinear")
    torch.manual_seed(0)
    x = torch.rand(2, 3, 48, 64)
    with torch.no_grad():
        img = r.model.encode_image(clip_preprocess(x, 32, (0.5,) * 3, (0.25,) * 3, "shortest", "bilinear"))
        bicubic = r.model.encode_image(clip_preprocess(x, 32, (0.5,) * 3, (0.25,) * 3, "shortest", "bicubic"))
    assert not torch.allclose(img, bicubic, atol=1e-4)
    img_r, _ = r.embed(x, ["a cross", "a square"])
    torch.testing.assert_close(img_r, img, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(build_features(f"open_clip:local-dir:{d}")(x), img, rtol=1e-5, atol=1e-5)


def test_a_one_element_mean_or_std_list_is_one_number_for_all_three_channels() -> None:
    """``"image_mean": [0.5]`` (a list of one, as for a grey model) is that number for every channel, as one number
    is; two numbers are refused."""
    from types import SimpleNamespace

    import pytest

    from imgalign.rewards.features import per_channel

    proc = SimpleNamespace(image_mean=[0.5], image_std=(0.25,))
    assert per_channel(proc, "image_mean", "m") == (0.5, 0.5, 0.5)
    assert per_channel(proc, "image_std", "m") == (0.25, 0.25, 0.25)
    with pytest.raises(ValueError, match="image_mean"):
        per_channel(SimpleNamespace(image_mean=[0.5, 0.5]), "image_mean", "m")


def test_a_half_precision_image_is_resized_on_the_cpu_and_stays_in_its_dtype() -> None:
    """torch's antialiased CPU kernels have no bfloat16 or float16: resize goes through float32 and gives the
    image back in its own dtype (the model's), with float32's numbers."""
    from imgalign.rewards.features import resize

    torch.manual_seed(0)
    x = torch.rand(2, 3, 40, 30)
    for dtype in (torch.bfloat16, torch.float16):
        out = resize(x.to(dtype), (16, 12))
        assert out.dtype == dtype and out.shape == (2, 3, 16, 12)
        want = resize(x.to(dtype).float(), (16, 12)).to(dtype)
        torch.testing.assert_close(out, want, rtol=0, atol=0)


def test_the_stats_peak_to_mean_feature_sees_grid_textures_above_a_quarter_of_the_band() -> None:
    """Stripes in light noise whose frequency lies in the upper spectrum (12, 16 and 20 cycles over 64 pixels: radius
    0.27, 0.35 and 0.44 of the half-diagonal) give a high peak-to-mean ratio (feature 57, its log); noise alone a
    low one."""
    import math

    from imgalign.rewards.features import STATS_DIM, image_stats

    assert STATS_DIM == 59
    xx = torch.arange(64).float().expand(64, 64)
    torch.manual_seed(0)
    for cycles in (12, 16, 20):
        grey = 0.5 + 0.3 * torch.sin(2 * math.pi * cycles * xx / 64) + 0.05 * torch.randn(64, 64)
        assert image_stats(grey.clamp(0, 1).expand(1, 3, 64, 64).clone())[0, 57] > 4.0
    assert image_stats(torch.rand(1, 3, 64, 64))[0, 57] < 2.0

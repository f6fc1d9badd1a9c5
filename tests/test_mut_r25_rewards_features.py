"""Round 25 mutation tests for ``imgalign.rewards.features``: an encoder's rows come back float32, a relative
recorded encoder path is not called gone, per-channel values and rescale factors are refused as the processor
cannot use them, and the stats features (histogram centres, grey level, spectrum without its mean, energy) are
what their docstrings say."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from imgalign.rewards.features import (
    STATS_DIM,
    FeatureEncoder,
    _soft_hist,
    image_processor_transform,
    image_stats,
    per_channel,
    recorded_encoder_gone,
)

LAPLACIAN = slice(48, 51)  # after 3 channel, saturation, value and gradient histograms of 8 bins
BANDS = slice(51, 57)


def test_an_encoder_gives_float32_rows_whatever_its_model_returns() -> None:
    enc = FeatureEncoder("f64", lambda x: x.double().mean((2, 3)), 3, torch.device("cpu"), torch.float32)
    out = enc(torch.rand(5, 3, 4, 4), batch_size=2)
    assert out.dtype == torch.float32 and out.shape == (5, 3)


def test_a_relative_recorded_encoder_path_is_not_said_to_be_gone(tmp_path, monkeypatch) -> None:
    """Only a recorded absolute folder can be gone: a relative one was recorded by other code (local_name makes
    existing folders absolute), and is read where the user stands."""
    monkeypatch.chdir(tmp_path)
    assert recorded_encoder_gone("dinov2:models/no-dino", "head h.safetensors", "features") == ""
    gone = recorded_encoder_gone(f"dinov2:{tmp_path / 'no-dino'}", "head h.safetensors", "features")
    assert "is no longer there" in gone and "features=dinov2:NEW_PATH" in gone


def test_four_channel_values_are_refused() -> None:
    with pytest.raises(ValueError, match=r"image_mean \[0.1, 0.2, 0.3, 0.4\] is not one number or three"):
        per_channel(SimpleNamespace(image_mean=[0.1, 0.2, 0.3, 0.4]), "image_mean", "enc")


def test_a_rescale_factor_of_zero_is_refused() -> None:
    """A rescale_factor of 0 made every image black, silently."""
    proc = SimpleNamespace(
        size={"shortest_edge": 8}, do_center_crop=False, do_normalize=False, rescale_factor=0
    )
    with pytest.raises(ValueError, match="rescale_factor 0 is not a number > 0"):
        image_processor_transform(proc, "enc", "cpu", torch.float32)


def test_the_soft_histogram_has_its_first_and_last_bins_at_the_ends_of_the_range() -> None:
    hist = _soft_hist(torch.tensor([[0.0, 1.0, 1.0, 1.0]]), 8)
    torch.testing.assert_close(hist, torch.tensor([[0.25, 0, 0, 0, 0, 0, 0, 0.75]]))
    mid = _soft_hist(torch.tensor([[-1.5]]), 4, -3.0, 0.0)  # halfway between the centres -2 and -1
    torch.testing.assert_close(mid, torch.tensor([[0.0, 0.5, 0.5, 0.0]]))


def test_the_stats_edges_and_spectrum_are_of_the_grey_level_of_all_three_channels() -> None:
    """A green checkerboard on a constant red channel has Laplacian energy and high-frequency bands: the grey level
    is the mean of the channels, not one of them."""
    x = torch.zeros(1, 3, 16, 16)
    x[:, 0] = 0.5
    x[:, 1] = ((torch.arange(16)[:, None] + torch.arange(16)) % 2).float()
    feats = image_stats(x)
    assert feats.shape == (1, STATS_DIM)
    assert float(feats[0, LAPLACIAN.start]) > math.log(1e-4) + 1  # the full-size scale's
    assert float(feats[0, BANDS.stop - 1]) > math.log(1e-8) + 1  # the checkerboard's top band


def test_a_flat_image_has_no_band_energy_and_its_total_energy_is_the_last_feature() -> None:
    """The spectrum is of the image less its mean: a flat image has no energy in any band (a level exact in binary,
    so its mean is exact too), and the last feature (log total energy / 10) tells a flat image from a textured one."""
    flat = image_stats(torch.stack([torch.full((3, 16, 16), 0.5), torch.full((3, 16, 16), 0.25)]))
    torch.testing.assert_close(flat[:, BANDS], torch.full((2, 6), math.log(1e-8)))
    torch.testing.assert_close(flat[:, -1], torch.full((2,), math.log(1e-8) / 10))
    noise = image_stats(torch.rand(1, 3, 16, 16, generator=torch.Generator().manual_seed(0)))
    assert float(noise[0, -1]) > 0


@pytest.mark.parametrize(("do_rescale", "factor", "scale"), [(True, 2 / 255, 2.0), (False, 1 / 255, 255.0)])
def test_the_processor_rescales_the_8_bit_pixels_by_its_factor(
    do_rescale: bool, factor: float, scale: float
) -> None:
    """The transform takes [0, 1] images; the processor multiplies 0-255 pixels by rescale_factor (when do_rescale
    is on), so a factor of 2/255 doubles them and do_rescale off leaves them 0-255."""
    proc = SimpleNamespace(
        size={"height": 4, "width": 4},
        do_center_crop=False,
        do_normalize=False,
        do_rescale=do_rescale,
        rescale_factor=factor,
    )
    x = torch.rand(2, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(image_processor_transform(proc, "enc", "cpu", torch.float32)(x), x * scale)


def test_dinov2_tokens_leave_out_the_register_tokens(tmp_path) -> None:
    """A DINOv2 with registers: tokens are the CLS and the patch tokens of its last hidden state, the registers
    (between them) dropped."""
    from transformers import BitImageProcessor, Dinov2WithRegistersConfig, Dinov2WithRegistersModel

    from imgalign.rewards.features import build_features

    torch.manual_seed(0)
    cfg = Dinov2WithRegistersConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
        num_register_tokens=2,
    )
    model = Dinov2WithRegistersModel(cfg).eval()
    model.save_pretrained(tmp_path)
    BitImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(
        tmp_path
    )
    enc = build_features(f"dinov2:{tmp_path}")
    x = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    tokens = enc.tokens(x)
    assert tokens.shape == (1, 1 + 16, 32)
    torch.testing.assert_close(tokens[:, 0], enc(x))
    with torch.no_grad():
        hidden = model(pixel_values=enc_pixels(tmp_path, x)).last_hidden_state
    torch.testing.assert_close(tokens[:, 1:], hidden[:, 3:])


def enc_pixels(folder, x: torch.Tensor) -> torch.Tensor:
    from transformers import AutoImageProcessor

    return image_processor_transform(AutoImageProcessor.from_pretrained(folder), "enc", "cpu", torch.float32)(
        x
    )


def test_a_processor_that_does_not_resize_only_crops() -> None:
    """do_resize false (a processor for images already of its size): the image keeps its size and is only
    centre-cropped, whatever size= says."""
    proc = SimpleNamespace(
        do_resize=False,
        size={"shortest_edge": 8},
        crop_size={"height": 4, "width": 4},
        do_normalize=False,
        rescale_factor=1 / 255,
    )
    x = torch.rand(2, 3, 6, 7, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(
        image_processor_transform(proc, "enc", "cpu", torch.float32)(x), x[..., 1:5, 1:5]
    )

"""Mutation round 31 (helper e): rewards/features.py behaviour no earlier test pinned."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from imgalign.rewards.features import (
    STATS_DIM,
    FeatureEncoder,
    image_processor_transform,
    image_stats,
    processor_geometry,
)


def test_a_crop_taller_than_the_image_pads_the_odd_row_at_the_bottom() -> None:
    """transformers pads (ph // 2) rows on top and the rest below, as it does columns."""
    x = torch.rand(1, 3, 3, 4) + 1  # no pixel is 0, so padding shows
    out = processor_geometry(x, None, (3, 4), (6, 4))
    assert out.shape == (1, 3, 6, 4)
    assert (out[..., :1, :] == 0).all() and (out[..., 4:, :] == 0).all()
    assert torch.equal(out[..., 1:4, :], x)


def _proc(**kw: object) -> SimpleNamespace:
    return SimpleNamespace(size={"height": 4, "width": 4}, do_center_crop=False, do_normalize=False, **kw)


def test_a_processor_without_a_rescale_factor_rescales_by_one_over_255() -> None:
    """A processor that rescales but names no factor uses transformers' 1/255: [0, 1] pixels stay [0, 1]."""
    x = torch.rand(2, 3, 4, 4)
    out = image_processor_transform(_proc(), "p", "cpu", torch.float32)(x)
    assert torch.allclose(out, x, atol=1e-6)


def test_a_processor_with_resample_0_resizes_nearest() -> None:
    """PIL's resample code 0 is nearest: each pixel of a 2x2 image becomes a 2x2 block of the 4x4 one."""
    x = torch.rand(1, 3, 2, 2)
    out = image_processor_transform(_proc(resample=0), "p", "cpu", torch.float32)(x)
    assert torch.allclose(out, x.repeat_interleave(2, -2).repeat_interleave(2, -1), atol=1e-6)


def test_a_flat_image_puts_its_whole_gradient_histogram_in_the_lowest_bin() -> None:
    """The gradient histogram spans log10 gradients -3..0: a flat image's (about 1e-3) falls in bin 0."""
    hist = image_stats(torch.full((1, 3, 8, 8), 0.5))[0, 40:48]
    assert hist[0] > 0.99 and hist.sum() == pytest.approx(1.0, abs=1e-3)


def test_a_wave_on_a_band_edge_is_counted_in_one_fourier_band() -> None:
    """The radial bands split the spectrum without overlap: at 187x187 a frequency lies exactly on the edge
    between bands 3 and 4, and a wave there must add up to one band's worth of energy, not two."""
    h = w = 187
    edges = torch.linspace(0, 1.0001, 7)
    yy, xx = torch.meshgrid(torch.arange(h) - h // 2, torch.arange(w) - w // 2, indexing="ij")
    r = torch.sqrt(yy.float() ** 2 + xx.float() ** 2) / (math.hypot(h, w) / 2)
    on_edge = (r == edges[3]).nonzero()
    assert len(on_edge), "no frequency on a band edge: the test needs another size"
    fy, fx = (int(v) for v in (yy[tuple(on_edge[0])], xx[tuple(on_edge[0])]))
    gy, gx = torch.meshgrid(torch.arange(h).float(), torch.arange(w).float(), indexing="ij")
    img = (0.5 + 0.4 * torch.cos(2 * math.pi * (fy * gy / h + fx * gx / w))).expand(1, 3, h, w)
    bands = image_stats(img)[0, 51:57].exp()
    assert bands.sum() == pytest.approx(1.0, abs=1e-3)


def test_tokens_of_an_encoder_without_patch_tokens_name_it_and_the_encoder_that_has_them() -> None:
    enc = FeatureEncoder("stats", image_stats, STATS_DIM, torch.device("cpu"), torch.float32)
    with pytest.raises(ValueError, match=r"'stats' gives no patch tokens; use a dinov2:PATH"):
        enc.tokens(torch.rand(1, 3, 8, 8))

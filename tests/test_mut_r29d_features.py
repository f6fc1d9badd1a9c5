"""Mutation round 29 (helper d): rewards/features.py survivors."""

from __future__ import annotations

import torch

from imgalign.rewards.features import clip_preprocess, resize


def test_a_nearest_resize_repeats_pixels_and_a_nearest_clip_preprocess_runs() -> None:
    """resize(mode='nearest') (a processor's resample=0, an open_clip model's interpolation 'nearest') takes
    neither antialias nor align_corners, which torch refuses for that mode: each pixel is repeated."""
    x = torch.arange(12.0).view(1, 3, 2, 2) / 12
    out = resize(x, (4, 4), "nearest")
    assert torch.equal(out, x.repeat_interleave(2, -2).repeat_interleave(2, -1))
    y = clip_preprocess(x, 4, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), "shortest", "nearest")
    assert torch.equal(y, out)


def test_a_one_pixel_high_strip_keeps_one_row_when_its_longest_edge_is_resized() -> None:
    """resize_mode 'longest' of a 1x200 strip to 32: its short side rounds to 0.16 px, kept at 1 row and padded."""
    x = torch.ones(1, 3, 1, 200)
    y = clip_preprocess(x, 32, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), "longest")
    assert y.shape == (1, 3, 32, 32)
    assert (y.sum((1, 3)) > 0).sum() == 1  # one row of the strip, the rest padding

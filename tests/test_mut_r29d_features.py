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

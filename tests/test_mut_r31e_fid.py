"""Mutation round 31 (helper e): rewards/fid.py's matrix square root and the size of images update() adds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from imgalign.rewards.features import resize
from imgalign.rewards.fid import FIDReward, psd_sqrt


def test_psd_sqrt_clamps_a_negative_eigenvalue_to_zero() -> None:
    """An indefinite matrix's negative eigenvalue counts as 0 in the square root, not as its magnitude."""
    assert torch.allclose(
        psd_sqrt(torch.diag(torch.tensor([4.0, -1.0]))),
        torch.diag(torch.tensor([2.0, 0.0], dtype=torch.float64)),
    )


def test_update_adds_images_at_the_reference_size_with_stats_features(tmp_path: Path) -> None:
    """Stats features depend on the image size: images added by update() are resized to the reference's, as
    scored and init= images are, so 32x32 images enter the set as their 16x16 resize would."""
    ref = tmp_path / "ref"
    ref.mkdir()
    rng = np.random.default_rng(0)
    for i in range(4):
        Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(ref / f"{i}.png")
    large = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    a, b = (FIDReward(features="stats", ref=str(ref), set_size=8) for _ in range(2))
    a.update(large)
    b.update(resize(large, (16, 16)).clamp(0, 1))
    assert torch.allclose(a.buffer, b.buffer)

"""Mutation round 27 (helper d): rewards/artifact.py."""

from __future__ import annotations

import random

import torch

from imgalign.rewards import artifact


def test_overlapping_noise_blotches_add_noise_of_the_drawn_strength_not_a_multiple(monkeypatch):
    # every blotch covers the whole image, so 2-3 of them overlap everywhere: the mask they make is still at most
    # 1, and the noise is randn times the drawn strength (unclamped, two blotches doubled it)
    monkeypatch.setattr(artifact, "_region_mask", lambda h, w, rng, frac=(0.3, 0.7): torch.ones(h, w))
    seed = next(s for s in range(100) if _blotches(s) >= 2)
    x = torch.full((3, 8, 8), 0.5)
    y = artifact.add_artifact(x, "noise", random.Random(seed))
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    rng.randint(1, 3)  # the number of blotches
    strength = rng.uniform(0.12, 0.3)
    want = (x + torch.randn(x.shape, generator=g) * strength).clamp(0, 1)
    assert torch.allclose(y, want, atol=1e-6)


def _blotches(seed: int) -> int:
    rng = random.Random(seed)
    rng.randrange(2**31)
    return rng.randint(1, 3)


def test_broken_edges_work_on_an_image_whose_sides_are_not_multiples_of_four():
    # the random blocks are 4x4 pixels: h // 4 + 1 of them cover 30 rows (h // 4 = 7 blocks cover only 28)
    x = torch.zeros(3, 30, 22)
    x[:, 5:25, 5:17] = 1.0  # a white rectangle: edges to break
    y = artifact.add_artifact(x, "broken_edges", random.Random(0))
    assert y.shape == x.shape
    assert not torch.equal(y, x)

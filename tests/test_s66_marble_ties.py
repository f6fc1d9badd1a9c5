"""MARBLE's exact min-norm solver shares alpha between identical gradients for K >= 3 as min_norm_2 does for K = 2
(stop 66; round 28b's note: the first vertex in mask order took all of it)."""

from __future__ import annotations

import torch

from imgalign.trainers.balance import _min_norm_enumerate, min_norm_2


def _gram(rows):
    g = torch.tensor(rows, dtype=torch.float64)
    return g @ g.T


def test_two_equal_gradients_split_their_share():
    a = _min_norm_enumerate(_gram([[1.0, 0.3], [1.0, 0.3], [0.2, 1.0]]))
    assert torch.allclose(a[0], a[1]) and a[0] > 0.2  # was [0.478, 0, 0.522]
    assert torch.allclose(a[0] + a[1], torch.tensor(0.4779, dtype=torch.float64), atol=1e-4)  # the same point


def test_equal_gradients_split_evenly_as_min_norm_2_does():
    assert torch.allclose(
        _min_norm_enumerate(_gram([[1.0, 0.0]] * 3)), torch.full((3,), 1 / 3, dtype=torch.float64)
    )
    assert torch.allclose(_min_norm_enumerate(_gram([[1.0, 0.0]] * 2)), min_norm_2(_gram([[1.0, 0.0]] * 2)))


def test_a_unique_optimum_is_unchanged():
    a = _min_norm_enumerate(_gram([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 4.0]]))
    want = torch.tensor([16.0, 4.0, 1.0], dtype=torch.float64) / 21.0  # alpha_i ∝ 1/|g_i|² for orthogonal g
    assert torch.allclose(a, want)

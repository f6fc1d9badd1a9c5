"""MARBLE's exact min-norm solver shares alpha between identical gradients whatever their scale, and where the
gradients' hull holds the origin (round 29j: the stop-66 tie rule's tolerance was relative to the optimum, so it
never held at an optimum of 0, and the KKT solves at |g|² of 1e8 lost the digits the tie needed; mutants on the tie
test survived)."""

from __future__ import annotations

import pytest
import torch

from imgalign.trainers.balance import _min_norm_enumerate


def _gram(rows, scale=1.0):
    g = torch.tensor(rows, dtype=torch.float64) * scale
    return g @ g.T


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3, 1e4])
def test_two_equal_gradients_split_evenly_at_any_scale(scale):
    a = _min_norm_enumerate(_gram([[1.0, 0.3], [1.0, 0.3], [0.2, 1.0]], scale))
    # at 1e4 it was [0.478, 0, 0.522]; at 1e3 [0.238924, 0.238952, 0.522]
    assert abs(a[0] - a[1]) < 1e-9, a
    assert torch.allclose(a[2], torch.tensor(0.52212389, dtype=torch.float64), atol=1e-6)


@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_equal_gradients_share_where_the_optimum_is_zero(scale):
    """Three equal gradients and their opposite: the min-norm point is 0, reached by any split that gives the
    opposite one half; the three equal ones share the other half (it was [0.5, 0, 0.5, 0])."""
    a = _min_norm_enumerate(_gram([[-1.0, 2.0], [-1.0, 2.0], [1.0, -2.0], [-1.0, 2.0]], scale))
    want = torch.tensor([1 / 6, 1 / 6, 1 / 2, 1 / 6], dtype=torch.float64)
    assert torch.allclose(a, want, atol=1e-9), a


def test_zero_gradients_are_still_solved():
    a = _min_norm_enumerate(torch.zeros(3, 3, dtype=torch.float64))
    assert torch.isfinite(a).all() and torch.allclose(a.sum(), torch.tensor(1.0, dtype=torch.float64))


def test_a_zero_gradient_does_not_take_all_of_alpha_from_a_wider_face():
    """A zero gradient among gradients whose hull holds the origin: the vertex at 0 (one face) and wider faces reach
    the same point; the tie keeps the widest, not the zero gradient's vertex that comes later in mask order (round
    29j mutants: '>' -> '>=' on the width, the 'not tie' dropped, or the width never recorded, gave [0, 0, 1, 0, 0])."""
    gram = _gram([[1.0, 1.0], [2.0, -1.0], [0.0, 0.0], [0.0, 2.0], [-2.0, 0.0]])
    a = _min_norm_enumerate(gram)
    assert float(a @ gram @ a) < 1e-12  # the min-norm point 0 either way
    assert int((a > 1e-9).sum()) == 4 and a[2] < 0.5, a

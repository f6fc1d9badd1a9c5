"""trainers/balance.py, mutation round 24: behaviour the round's surviving mutants showed untested."""

from __future__ import annotations

import torch

from imgalign.trainers.balance import min_norm_2


def test_min_norm_2_treats_a_rounding_level_denominator_as_identical_gradients():
    """Two gradients equal up to rounding (||g1 - g2||² = G11 + G22 - 2·G12 of ~1e-16 relative to the norms) make
    every alpha optimal: MARBLE takes [0.5, 0.5], not the arbitrary 0/1 split a division by the rounding residue
    gives (0 / 1.1e-16 = 0 put all the weight on the second reward)."""
    gram = torch.tensor([[0.1 + 0.2, 0.3], [0.3, 0.3]], dtype=torch.float64)
    assert float(gram[0, 0] + gram[1, 1] - 2.0 * gram[0, 1]) > 0  # a residue, not an exact 0
    torch.testing.assert_close(min_norm_2(gram), torch.tensor([0.5, 0.5], dtype=torch.float64))
    # a real difference between the gradients still gets the closed form: g2 = 2·g1 puts all weight on g1
    torch.testing.assert_close(
        min_norm_2(torch.tensor([[1.0, 2.0], [2.0, 4.0]], dtype=torch.float64)),
        torch.tensor([1.0, 0.0], dtype=torch.float64),
    )

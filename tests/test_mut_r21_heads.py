"""rewards/heads.py: behaviour mutation round 21 found unchecked."""

from __future__ import annotations

import pytest
import torch

from imgalign.rewards.heads import fit_head


def test_one_negative_is_refused_before_the_split() -> None:
    """Either class with fewer than 2 examples is refused naming both counts (not only the positives)."""
    with pytest.raises(ValueError, match="need at least 2 examples per class, got 5 and 1"):
        fit_head(torch.randn(5, 4), torch.randn(1, 4), epochs=1, val_frac=0.0)


def test_a_split_leaving_one_training_example_per_class_is_refused() -> None:
    """val_frac 0.5 of 3 holds out 2, leaving 1 to train on per class: refused, since a head needs 2."""
    with pytest.raises(ValueError, match="val_frac 0.5 leaves 1 and 1 examples to train on"):
        fit_head(torch.randn(3, 4), torch.randn(3, 4), epochs=1, val_frac=0.5)

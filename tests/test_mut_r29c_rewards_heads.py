"""Mutation round 29 (helper c): ``rewards.heads``: fit_head refuses a val_frac that leaves fewer than 2 negatives to
train on, as it does for positives (the negative side alone went unpinned)."""

from __future__ import annotations

import pytest
import torch

from imgalign.rewards.heads import fit_head


def test_a_val_frac_leaving_one_negative_to_train_on_is_refused() -> None:
    pos, neg = torch.randn(10, 4), torch.randn(2, 4)
    with pytest.raises(
        ValueError, match=r"^val_frac 0.5 leaves 5 and 1 examples to train on \(at least 2 per class needed\)"
    ):
        fit_head(pos, neg, val_frac=0.5, epochs=1)

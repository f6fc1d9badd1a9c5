"""Round 25 mutation tests for ``imgalign.rewards.heads``: a fitted head comes back in eval mode, as a loaded
one does."""

from __future__ import annotations

import torch

from imgalign.rewards.heads import fit_head


def test_a_fitted_head_comes_back_in_eval_mode() -> None:
    g = torch.Generator().manual_seed(0)
    pos, neg = torch.randn(6, 4, generator=g) + 1, torch.randn(6, 4, generator=g) - 1
    res = fit_head(pos, neg, hidden=3, epochs=3, val_frac=0.0)
    assert not res.head.training and not any(m.training for m in res.head.modules())

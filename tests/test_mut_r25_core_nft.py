"""Mutation round 25 (stop 62): a saved NFT/EMA state of another model names the first tensor that differs."""

from __future__ import annotations

import pytest
import torch

from imgalign.trainers.nft import EmaParams


def test_a_saved_ema_of_another_model_names_its_first_mismatched_tensor():
    """Two of four tensors differ (the first and the last): the error names the first one by its module name,
    with both shapes, and counts the two."""
    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 1))
    ema = EmaParams.from_module(model)
    shadow = [torch.zeros(4, 2), torch.zeros(3), torch.zeros(1, 3), torch.zeros(2)]
    with pytest.raises(
        ValueError, match=r"saved EMA of 0\.weight has shape \[4, 2\], the model's is \[3, 2\] \(2 "
    ):
        ema.load_state_dict({"decay": 0.5, "shadow": shadow})

"""Mutation round 21: the vlm_loglik reward's model loading (rewards/vlm.py)."""

from __future__ import annotations

import torch

from imgalign.hub import embedded_path
from imgalign.rewards.vlm import load_vlm


def test_a_vlm_folder_loads_frozen_in_eval_mode() -> None:
    """A save_pretrained folder is loaded in eval mode (no dropout: one image and prompt always score the same) and
    without gradients."""
    model, _ = load_vlm(str(embedded_path("shapes-vlm")), torch.device("meta"), torch.float32)
    assert not any(m.training for m in model.modules())
    assert not any(p.requires_grad for p in model.parameters())

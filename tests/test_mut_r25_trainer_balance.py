"""Round 25: tests that kill round 24's trainers/balance.py mutants the existing tests let through."""

from __future__ import annotations

import math

import torch

from imgalign.trainers.balance import MarbleBalancer, group_normalize


def test_group_normalize_clips_nothing_unless_asked() -> None:
    # one success among 30 samples of a prompt: its advantage is sqrt(29) ~ 5.39 (population std); tree credit and
    # MARBLE's per-reward advantages call group_normalize without a clip and must get it whole
    x = torch.zeros(30)
    x[7] = 1.0
    adv = group_normalize(x, torch.zeros(30, dtype=torch.long), eps=0.0)
    assert math.isclose(float(adv[7]), math.sqrt(29), rel_tol=1e-5)
    assert math.isclose(
        float(group_normalize(x, torch.zeros(30, dtype=torch.long), eps=0.0, clip=5.0)[7]), 5.0
    )


def test_marble_balancer_keeps_nine_tenths_of_its_alpha_by_default() -> None:
    # the second reward's gradient vanishes (all its groups tied): alpha* = [1, 0], EMA'd with the default 0.9
    marble = MarbleBalancer(2)
    assert torch.equal(
        marble.update(torch.eye(2, dtype=torch.float64)), torch.tensor([0.5, 0.5], dtype=torch.float64)
    )
    alpha = marble.update(torch.diag(torch.tensor([1.0, 0.0], dtype=torch.float64)))
    torch.testing.assert_close(alpha, torch.tensor([0.55, 0.45], dtype=torch.float64))

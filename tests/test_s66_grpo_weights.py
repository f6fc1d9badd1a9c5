"""grpo_clipped_loss with fractional weights is the weighted mean sum(w·x)/sum(w) (stop 66; round 28's note)."""

from __future__ import annotations

import torch

from imgalign.trainers.grpo import grpo_clipped_loss


def test_fractional_weights_give_the_weighted_mean():
    lp = torch.tensor([0.0, 0.3, -0.4])
    old = torch.zeros(3)
    adv = torch.tensor([1.0, -2.0, 0.5])
    per = torch.stack(
        [grpo_clipped_loss(lp[i : i + 1], old[i : i + 1], adv[i : i + 1], 0.2).loss for i in range(3)]
    )
    out = grpo_clipped_loss(lp, old, adv, 0.2, torch.tensor([0.5, 0.0, 0.0]))
    assert torch.allclose(out.loss, per[0])  # was per[0] / 2: the weights' sum 0.5 was clamped up to 1
    out = grpo_clipped_loss(lp, old, adv, 0.2, torch.tensor([0.25, 0.25, 0.0]))
    assert torch.allclose(out.loss, (per[0] + per[1]) / 2)
    assert torch.allclose(
        out.clipfrac, torch.tensor(0.5)
    )  # sample 1's ratio e^0.3 is clipped, sample 0's is not
    assert torch.allclose(out.approx_kl, torch.tensor(0.5 * 0.09 / 2))


def test_zero_weights_still_give_zero_not_nan():
    out = grpo_clipped_loss(
        torch.tensor([float("nan"), 0.1]), torch.zeros(2), torch.ones(2), 0.2, torch.zeros(2)
    )
    assert out.loss.item() == 0.0 and out.clipfrac.item() == 0.0 and out.approx_kl.item() == 0.0

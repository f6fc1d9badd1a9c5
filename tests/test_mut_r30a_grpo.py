"""trainers/grpo.py, mutation round 30a: behaviour the round's surviving mutants showed untested."""

from __future__ import annotations

import torch

from imgalign.trainers.grpo import grpo_clipped_loss, off_policy_warning


def test_float64_weights_give_float32_loss_and_metrics_with_the_weighted_mean():
    """`weights` are read as float32 whatever their dtype: float64 (or bool) masks from a caller do not turn the
    loss and its metrics into float64."""
    lp = torch.tensor([0.1, -0.2, 0.0])
    adv = torch.tensor([1.0, -1.0, 2.0])
    ref = grpo_clipped_loss(lp, torch.zeros(3), adv, 0.2, torch.tensor([1.0, 0.5, 0.0]))
    out = grpo_clipped_loss(lp, torch.zeros(3), adv, 0.2, torch.tensor([1.0, 0.5, 0.0], dtype=torch.float64))
    assert out.loss.dtype == torch.float32
    assert out.clipfrac.dtype == torch.float32 and out.approx_kl.dtype == torch.float32
    torch.testing.assert_close(out.loss, ref.loss)
    torch.testing.assert_close(out.approx_kl, ref.approx_kl)
    bool_out = grpo_clipped_loss(lp, torch.zeros(3), adv, 0.2, torch.tensor([True, True, False]))
    assert bool_out.loss.dtype == torch.float32
    assert bool_out.clipfrac.dtype == torch.float32 and bool_out.approx_kl.dtype == torch.float32


def test_an_approx_kl_just_above_one_is_warned_about():
    """The off-policy threshold is an approx_kl of 1 (typical steps: 0.01-0.1): 1.5 warns, naming the threshold."""
    msg = off_policy_warning(1.5, 1e-4, 20)
    assert msg is not None and "policy/approx_kl = 1.5 > 1.0" in msg
    assert off_policy_warning(0.99, 1e-4, 20) is None

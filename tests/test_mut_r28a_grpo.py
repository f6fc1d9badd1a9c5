"""trainers/grpo.py, mutation round 28a: behaviour the round's surviving mutants showed untested."""

from __future__ import annotations

import torch

from imgalign.trainers.grpo import group_advantages, grpo_clipped_loss


def test_group_advantages_of_an_empty_batch_are_empty_with_a_zero_tied_share():
    """No samples means no groups: the tied share is 0 (not a division by zero) and every output is empty."""
    out = group_advantages(torch.zeros(0), torch.zeros(0, dtype=torch.long))
    assert out.advantages.shape == (0,) and out.valid.shape == (0,)
    assert out.zero_std_ratio == 0.0


def test_the_surrogate_of_float64_log_probs_is_float32_and_keeps_a_small_log_ratio_of_large_sums():
    """kernels.reduce_dims returns float64 summed log-densities (~2e5 for a 1024 px latent); the surrogate takes
    their difference in float64 and computes the ratio, loss and metrics in float32 from it."""
    old = torch.tensor([2.0e5, -1.5e5], dtype=torch.float64)
    new = old + torch.tensor([0.1, -0.05], dtype=torch.float64)
    out = grpo_clipped_loss(new, old, torch.tensor([1.0, 1.0]), 0.2)
    assert out.ratio.dtype == torch.float32 and out.loss.dtype == torch.float32
    assert out.approx_kl.dtype == torch.float32
    torch.testing.assert_close(out.ratio, torch.exp(torch.tensor([0.1, -0.05])))

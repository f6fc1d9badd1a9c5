"""trainers/grpo.py, mutation round 22: behaviour the round's surviving mutants showed untested."""

from __future__ import annotations

import torch

from imgalign.trainers.grpo import grpo_clipped_loss


def test_the_surrogates_ratio_is_returned_without_a_graph_while_its_loss_keeps_one():
    """The ratio is logged (policy/ratio_*), never back-propagated: returned detached, so a caller that keeps it
    holds no graph of the policy's forward, while the loss still reaches log_prob."""
    log_prob = torch.tensor([0.1, -0.2, 0.05], requires_grad=True)
    out = grpo_clipped_loss(log_prob, torch.zeros(3), torch.tensor([1.0, -1.0, 0.5]), 0.2)
    assert not out.ratio.requires_grad and out.ratio.grad_fn is None
    torch.testing.assert_close(out.ratio, torch.exp(log_prob.detach()))
    out.loss.backward()
    assert log_prob.grad is not None and bool((log_prob.grad != 0).any())

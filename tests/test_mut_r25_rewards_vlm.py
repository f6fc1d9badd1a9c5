"""Round 25 mutation tests for ``imgalign.rewards.vlm``: the first token, which nothing predicts, is not counted in
the mean even when the mask marks it."""

from __future__ import annotations

import math

import pytest
import torch

from imgalign.rewards.vlm import masked_mean_logprob


def test_a_masked_first_token_is_not_counted_in_the_mean() -> None:
    logits = torch.tensor([[[0.0, 0.0], [math.log(3.0), 0.0], [5.0, 5.0]]])
    ids = torch.tensor([[1, 1, 0]])
    mean, tok = masked_mean_logprob(logits, ids, torch.tensor([[True, True, True]]))
    assert tok[0, 0].item() == 0.0
    assert mean.item() == pytest.approx((math.log(0.5) + math.log(0.75)) / 2)

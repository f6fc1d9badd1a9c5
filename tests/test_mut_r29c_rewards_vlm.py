"""Mutation round 29 (helper c): ``rewards.vlm``: the warning of a sequence past the model's positions names the
first prompt that is longer than the limit, not an earlier one of exactly the limit (which fits)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from imgalign.rewards.vlm import VLMLogLikReward


def test_the_long_prompt_warned_of_is_the_first_past_the_limit_not_one_at_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    r = SimpleNamespace(_warned_long=False, max_positions=10, model_name="m")
    with caplog.at_level("WARNING", logger="imgalign.rewards.vlm"):
        VLMLogLikReward.warn_past_positions(
            r, torch.tensor([9, 10, 11, 12]), ["short", "fits", "one more", "two"]
        )  # type: ignore[arg-type]
    (msg,) = [rec.getMessage() for rec in caplog.records if rec.name == "imgalign.rewards.vlm"]
    assert "takes 11 tokens, more than the model's 10 positions" in msg
    assert msg.endswith("e.g. 'one more'")
    assert r._warned_long

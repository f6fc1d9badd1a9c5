"""Mutation round 29 (helper c): ``rewards.base``: a bytes prompt (one prompt read from a file in binary mode) is
refused as one string, not as a list of its byte values ("prompt 0 is of type int (97)")."""

from __future__ import annotations

import pytest
import torch

from imgalign.rewards.base import Reward, RewardOutput


class _Mean(Reward):
    name = "mean"

    def score(self, images, prompts, metadata):
        return RewardOutput(images.mean((1, 2, 3)))


def test_one_bytes_prompt_is_refused_as_one_string_not_read_byte_by_byte() -> None:
    with pytest.raises(
        ValueError, match=r"^reward 'mean': prompts is one string \(\"b'a cat'\"\), not a list of 5"
    ):
        _Mean()(torch.full((5, 3, 4, 4), 0.5), b"a cat")

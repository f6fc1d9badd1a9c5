"""Mutation round 27c: rewards/sanity.py behaviour no earlier test pinned."""

import math

import torch

from imgalign.rewards.base import Reward, RewardOutput
from imgalign.rewards.sanity import true_vs_corrupted


class _MinusInfOnCorrupted(Reward):
    """A finite score for the true prompts (the first call of each batch), -inf for the corrupted ones."""

    name = "minus_inf_on_corrupted"

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def score(self, images: torch.Tensor, prompts: list[str], metadata: object) -> RewardOutput:
        self.calls += 1
        value = 0.5 if self.calls % 2 else float("-inf")
        return RewardOutput(torch.full((images.shape[0],), value))


def test_a_finite_true_score_above_a_minus_inf_corrupted_one_is_no_win() -> None:
    """0.5 > -inf is True, but a -inf score is a broken one: the pair is a failure, as NaN's are."""
    res = true_vs_corrupted(_MinusInfOnCorrupted(), n=4, seed=0, batch_size=4)
    assert res.accuracy == 0.0
    assert res.n_nonfinite == 4
    assert set(res.per_kind.values()) == {0.0}
    assert math.isnan(res.mean_true) and math.isnan(res.mean_corrupted)

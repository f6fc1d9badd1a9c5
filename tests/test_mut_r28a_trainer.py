"""trainers/trainer.py, mutation round 28a: behaviour the round's surviving mutants showed untested."""

from __future__ import annotations

import torch

from imgalign.trainers.trainer import unscored_rewards


def test_a_single_scorable_sample_is_enough_to_name_the_reward_that_did_not_score_it() -> None:
    """Only a run where no sample could be scored (every one diverged) blames no reward: one scorable sample that
    a reward left NaN makes that reward the unscored one, as for any larger count."""
    assert unscored_rewards(["a", "b"], torch.tensor([0.0, 1.0]), 1) == ["a"]
    assert unscored_rewards(["a", "b"], torch.tensor([0.0, 0.0]), 1) == ["a", "b"]

"""Round 24 second pass (s61_m2A): tests that kill trainers/trainer.py mutants the existing tests let through."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from imgalign.config import ConfigError
from imgalign.trainers.trainer import FlowGRPOTrainer


def _per_reward_host(rollout: str = "my_pkg.rollouts:branching") -> SimpleNamespace:
    objective = SimpleNamespace(std_mode="group", adv_clip=5.0)
    return SimpleNamespace(
        cfg=SimpleNamespace(sampling=SimpleNamespace(rollout=rollout), objective=objective)
    )


def _two_reward_scores() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    scores = torch.tensor([[1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]])
    return scores, torch.tensor([0, 0, 1, 1]), torch.ones_like(scores, dtype=torch.bool)


def test_per_reward_advantages_refuses_a_plugin_rollout_with_its_own_credit() -> None:
    # the config refuses sampling.rollout=tree with marble; a plugin rollout (package.module:attr) that assigns its
    # own credit is only seen here, and one advantage per reward and sample would silently ignore that credit
    scores, gid, finite = _two_reward_scores()
    ro = SimpleNamespace(extras={"credit": lambda s, b: (torch.zeros(4), torch.ones(4, dtype=torch.bool))})
    with pytest.raises(ConfigError, match="own credit") as err:
        FlowGRPOTrainer._per_reward_advantages(_per_reward_host(), ro, scores, gid, finite)
    assert "my_pkg.rollouts:branching" in str(err.value)
    assert "sampling.rollout: flat" in str(err.value)


def test_per_reward_advantages_gives_each_reward_its_own_group_advantage() -> None:
    scores, gid, finite = _two_reward_scores()
    adv = FlowGRPOTrainer._per_reward_advantages(
        _per_reward_host(), SimpleNamespace(extras={}), scores, gid, finite
    )
    assert adv.shape == (2, 4)
    assert torch.all(adv[0, [1, 3]] > 0) and torch.all(adv[0, [0, 2]] < 0)
    assert torch.allclose(adv[1], -adv[0])

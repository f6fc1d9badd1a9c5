"""MARBLE with one reward: its settings are listed as unread, and only the main process warns (own fixes, stop 57)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from imgalign.config import load_config
from imgalign.trainers.config import FlowGRPOConfig, ignored_settings
from imgalign.trainers.trainer import FlowGRPOTrainer


def unread(*sets: str) -> list[str]:
    return ignored_settings(load_config(FlowGRPOConfig, None, list(sets)))


def test_marble_settings_with_one_reward_are_listed_as_unread() -> None:
    one = unread("rewards.balancer=marble", "rewards.marble.ema=0.5", "rewards.marble.refresh_every=3")
    reader = "(read with rewards.balancer=marble and two or more rewards)"
    assert one == [f"rewards.marble.ema {reader}", f"rewards.marble.refresh_every {reader}"]
    two = ["rewards.names=[geneval:mode=partial, clip]", "rewards.balancer=marble", "rewards.marble.ema=0.5"]
    assert unread(*two) == []
    # with the cosine diagnosis on, rewards.marble.gram is the space it measures in, whatever the rewards
    assert (
        unread("rewards.balancer=marble", "rewards.diagnose_cosines=true", "rewards.marble.gram=params") == []
    )


@pytest.mark.parametrize(("is_main", "warned"), [(True, 1), (False, 0)])
def test_only_the_main_process_warns_of_marble_with_one_reward(
    caplog: pytest.LogCaptureFixture, is_main: bool, warned: int
) -> None:
    cfg = load_config(FlowGRPOConfig, None, ["rewards.balancer=marble"])
    stand_in = SimpleNamespace(
        cfg=cfg, rewards={"geneval": None}, objective=SimpleNamespace(head=None), is_main=is_main
    )
    with caplog.at_level(logging.WARNING, logger="imgalign.trainers.balance"):
        balancing = FlowGRPOTrainer._build_balancing(stand_in)  # type: ignore[arg-type]
    assert balancing is not None and balancing.k == 1
    assert sum("marble with one reward" in r.getMessage() for r in caplog.records) == warned

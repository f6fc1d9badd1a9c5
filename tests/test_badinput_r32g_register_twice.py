"""Round 32 (helper g): a plug-in registering a reward name that another module registered (a built-in's) is refused
naming both; the same module registering its own name again (a notebook cell run twice) replaces it."""

from __future__ import annotations

import pytest
import torch

from imgalign.rewards import base
from imgalign.rewards.base import FunctionReward, build_reward, list_rewards, register_reward


@pytest.fixture(autouse=True)
def _own_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    base._import_builtin()
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))


def test_a_plugin_taking_a_built_in_name_is_refused_and_the_built_in_stays() -> None:
    """It replaced the built-in clip for the rest of the process, silently: a later `score --reward clip` scored with
    the plug-in in a column named clip."""
    builtin = list_rewards()["clip"]

    def mine(device="cpu", dtype=None):
        return FunctionReward(lambda images, prompts, metadata: [7.0] * len(prompts))

    with pytest.raises(
        ValueError,
        match=r"^reward name 'clip' is already registered by imgalign\.rewards\.clip \(CLIPScore.*\); register "
        r"this one \('.*mine' of .*test_badinput_r32g_register_twice\) under another name, e\.g\. 'my_clip'$",
    ):
        register_reward("clip", "my clip")(mine)
    assert list_rewards()["clip"] == builtin
    assert base._REGISTRY["clip"][0].__module__ == "imgalign.rewards.clip"


def test_the_same_module_registering_its_name_again_replaces_its_own() -> None:
    def first(device="cpu", dtype=None):
        return FunctionReward(lambda images, prompts, metadata: [1.0] * len(prompts), name="r32g_mine")

    def second(device="cpu", dtype=None):
        return FunctionReward(lambda images, prompts, metadata: [2.0] * len(prompts), name="r32g_mine")

    register_reward("r32g_mine", "first")(first)
    register_reward("r32g_mine", "second")(second)
    assert list_rewards()["r32g_mine"] == "second"
    assert build_reward("r32g_mine")(torch.zeros(1, 3, 4, 4), ["a"]).scores.tolist() == [2.0]


def test_a_plugin_taking_a_built_in_objective_name_is_refused_and_the_built_in_stays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """OBJECTIVES.register("grpo") in a plug-in replaced the built-in GRPO objective for the rest of the process."""
    from imgalign.trainers.registry import OBJECTIVES

    builtin = OBJECTIVES.get("grpo")
    monkeypatch.setattr(OBJECTIVES, "_items", dict(OBJECTIVES._items))

    def grpo(*args, **kwargs):
        return None

    with pytest.raises(
        ValueError,
        match=r"^objective name 'grpo' is already registered by imgalign\.trainers\.objectives; register this one "
        r"\('.*grpo' of .*test_badinput_r32g_register_twice\) under another name, e\.g\. 'my_grpo'$",
    ):
        OBJECTIVES.register("grpo")(grpo)
    assert OBJECTIVES.get("grpo") is builtin
    OBJECTIVES.register("r32g_mine")(grpo)
    OBJECTIVES.register("r32g_mine")(grpo)  # the same module again: its own, replaced
    assert OBJECTIVES.get("r32g_mine") is grpo

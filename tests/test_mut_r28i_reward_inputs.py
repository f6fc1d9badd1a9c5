"""Mutation round 28 (helper i): ``rewards.base``: prompts without both a length and indexing (a set, an object
indexed only) are refused; a bool tensor batch is scored as 0/1 while any integer dtype is refused; a plug-in cannot
take a built-in reward's name even when the built-ins were not imported yet."""

from __future__ import annotations

import sys

import pytest
import torch

from imgalign.rewards import base
from imgalign.rewards.base import FunctionReward, Reward, RewardOutput, register_reward


class _Mean(Reward):
    name = "mean"

    def score(self, images, prompts, metadata):
        return RewardOutput(images.mean((1, 2, 3)))


class _IndexedOnly:
    """Indexable (and so iterable) but without a length."""

    def __getitem__(self, i: int) -> str:
        if i >= 2:
            raise IndexError(i)
        return "a"


@pytest.mark.parametrize("prompts, kind", [({"a", "b"}, "set"), (_IndexedOnly(), "_IndexedOnly")])
def test_prompts_without_a_length_or_indexing_are_refused_naming_their_type(prompts, kind) -> None:
    with pytest.raises(
        ValueError, match=rf"^reward 'mean': prompts must be a list of 2 strings, one per image, got {kind}$"
    ):
        _Mean()(torch.full((2, 3, 4, 4), 0.5), prompts)


def test_a_bool_tensor_batch_is_scored_as_zeros_and_ones() -> None:
    x = torch.zeros(2, 3, 4, 4, dtype=torch.bool)
    x[1] = True
    assert _Mean()(x, ["a", "b"]).scores.tolist() == [0.0, 1.0]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int16, torch.int8])
def test_an_integer_tensor_of_any_width_is_refused(dtype) -> None:
    with pytest.raises(
        ValueError, match=rf"^images are a {str(dtype)[6:]} tensor: give float images in \[0, 1\]"
    ):
        _Mean()(torch.ones(1, 3, 4, 4, dtype=dtype), ["a"])


def test_a_plugin_cannot_take_a_built_in_name_before_the_built_ins_are_imported(
    tmp_path, monkeypatch
) -> None:
    """The built-ins are imported first, so the plug-in is the one refused, not a built-in imported later."""
    (tmp_path / "r28i_builtin_reward.py").write_text(
        "from imgalign.rewards.base import FunctionReward, register_reward\n\n"
        "@register_reward('r28i_builtin', 'a built-in')\n"
        "def make(device='cpu', dtype=None):\n"
        "    return FunctionReward(lambda images, prompts, metadata: [0.0] * len(prompts))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(base, "_REGISTRY", {})
    monkeypatch.setattr(base, "BUILTIN_MODULES", ["r28i_builtin_reward"])
    monkeypatch.delitem(sys.modules, "r28i_builtin_reward", raising=False)

    def mine(device="cpu", dtype=None):
        return FunctionReward(lambda images, prompts, metadata: [1.0] * len(prompts))

    try:
        with pytest.raises(
            ValueError, match=r"^reward name 'r28i_builtin' is already registered by r28i_builtin_reward"
        ):
            register_reward("r28i_builtin", "mine")(mine)
        assert base._REGISTRY["r28i_builtin"][0].__module__ == "r28i_builtin_reward"
    finally:
        sys.modules.pop("r28i_builtin_reward", None)

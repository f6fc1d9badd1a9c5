"""rewards.base edges round 20's mutants left open (round 21b: B27)."""

from __future__ import annotations

import pytest
import torch

from imgalign.rewards.base import FunctionReward, to_tensor


def test_an_empty_list_of_images_is_refused_in_plain_words() -> None:
    """No images at all: "no images given", not numpy's "need at least one array to stack" (B27)."""
    with pytest.raises(ValueError, match="^no images given$"):
        to_tensor([])
    reward = FunctionReward(lambda images, prompts, metadata: torch.zeros(len(prompts)), name="zeros")
    with pytest.raises(ValueError, match="^no images given$"):
        reward([], [])


def test_a_module_callable_taking_dtype_but_not_device_by_name_is_built_as_a_factory(monkeypatch) -> None:
    """``make(dtype=..., **kwargs)`` takes device/dtype, so it builds a Reward; read as a scoring function it was
    refused as "cannot be called as fn(images, prompts, metadata)" (B69)."""
    import sys
    import types

    from imgalign.rewards.base import Reward, build_reward

    seen: dict[str, object] = {}

    def make(dtype: torch.dtype = torch.float32, **kwargs: object) -> Reward:
        seen.update(dtype=dtype, **kwargs)
        return FunctionReward(lambda images, prompts, metadata: images.mean(dim=(1, 2, 3)), name="mean")

    mod = types.ModuleType("my_lab_r21b.factories")
    mod.make = make
    monkeypatch.setitem(sys.modules, "my_lab_r21b.factories", mod)
    reward = build_reward("my_lab_r21b.factories:make", dtype=torch.float64)
    assert seen == {"dtype": torch.float64, "device": "cpu"}
    torch.testing.assert_close(reward(torch.full((2, 3, 4, 4), 0.5), ["", ""]).scores, torch.full((2,), 0.5))


def test_a_registered_factory_without_a_readable_signature_is_left_its_options(monkeypatch) -> None:
    """A factory Python cannot read the signature of (a C callable; `dict` here) cannot be checked before it is
    built, so its options are left to the build instead of being refused as unknown with "its options: none"
    (B76)."""
    from imgalign.rewards import base

    monkeypatch.setitem(base._REGISTRY, "r21b_opaque", (dict, "a factory with no readable signature"))
    base.check_reward_options("r21b_opaque:threshold=0.5,mode=strict")

"""A reward registered with ``@register_reward`` on a function must give a Reward (stop 59)."""

from __future__ import annotations

import pytest
import torch

import imgalign.rewards.base as base


@pytest.fixture(autouse=True)
def scratch_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of the registry with the built-in rewards in it: registering into a copy made before they were
    imported would leave them registered in the copy only, and missing from every later test."""
    base._import_builtin()
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))


def test_a_registered_factory_that_returns_no_reward_is_refused_by_name() -> None:
    @base.register_reward("my_plain", "returns a tensor, not a Reward")
    def my_plain(device: str = "cpu", dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.zeros(1)

    with pytest.raises(
        ValueError, match=r"reward 'my_plain' is registered with .*my_plain.* returned a Tensor"
    ):
        base.build_reward("my_plain")


def test_a_registered_factory_that_returns_a_reward_is_built() -> None:
    def brightness(images: torch.Tensor, prompts: list[str], metadata: list[dict]) -> torch.Tensor:
        return images.mean(dim=(1, 2, 3))

    @base.register_reward("my_bright", "mean pixel value")
    def my_bright(device: str = "cpu", dtype: torch.dtype = torch.float32) -> base.Reward:
        return base.FunctionReward(brightness, name="my_bright")

    reward = base.build_reward("my_bright")
    assert isinstance(reward, base.Reward)
    out = reward(torch.full((2, 3, 8, 8), 0.25), ["a", "b"], [{}, {}])
    assert torch.allclose(out.scores, torch.full((2,), 0.25))

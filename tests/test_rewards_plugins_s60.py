"""A plug-in reward's own errors name it: one raised while it is built, and a wrong return, are one-line errors
(ValueError) that the CLI prints without a traceback."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from imgalign.rewards.base import Reward, build_reward, register_reward


def _module(monkeypatch, error: Exception) -> None:
    class NeedsWeights(Reward):
        name = "needs_weights"

        def __init__(self, device="cpu", dtype=torch.float32):
            super().__init__()
            raise error

        def score(self, images, prompts, metadata):
            return images.mean(dim=(1, 2, 3))

    mod = types.ModuleType("my_lab.s60_rewards")
    mod.NeedsWeights = NeedsWeights
    monkeypatch.setitem(sys.modules, "my_lab.s60_rewards", mod)


@pytest.mark.parametrize(
    ("error", "text"),
    [(KeyError("weights"), "KeyError: 'weights'"), (OSError("no file w.pt"), "OSError: no file w.pt")],
)
def test_a_plugin_reward_whose_constructor_raises_is_named(monkeypatch, error, text):
    _module(monkeypatch, error)
    with pytest.raises(ValueError) as e:
        build_reward("my_lab.s60_rewards:NeedsWeights")
    assert str(e.value).startswith(f"reward 'my_lab.s60_rewards:NeedsWeights' raised {text}; fix it there")
    assert e.value.__cause__ is error


def test_a_registered_rewards_constructor_error_is_raised_as_it_is(monkeypatch):
    from imgalign.rewards import base

    base._import_builtin()
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))

    @register_reward("s60_keyerror", "raises KeyError when built")
    def make(device="cpu", dtype=torch.float32):
        raise KeyError("weights")

    with pytest.raises(KeyError, match="weights"):
        build_reward("s60_keyerror")

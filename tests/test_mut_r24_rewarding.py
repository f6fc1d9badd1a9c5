"""Mutation round 24: which reward errors imgalign.trainers.rewarding names (a plug-in's) and which it raises as
they are (a built-in's, or a message that already names the reward), called directly (no model loads)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from imgalign.trainers.rewarding import reward_failure, reward_output

IMAGES = torch.rand(2, 3, 8, 8)


class Judge:
    """A user's own Reward class (defined outside imgalign) that fails with `error`."""

    name = "judge"

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __call__(self, images: torch.Tensor, prompts: list[str], metadata: Any = None) -> Any:
        raise self.error


class BuiltIn(Judge):
    """Stands for one of imgalign's own rewards (its class lives in an imgalign module)."""


BuiltIn.__module__ = "imgalign.rewards.fake"


def test_a_user_reward_class_s_error_is_named() -> None:
    with pytest.raises(ValueError, match=r"^reward 'judge' raised ValueError: no labels; fix it there") as e:
        reward_output("judge", Judge(ValueError("no labels")), IMAGES, ["a", "b"], [{}, {}])
    assert isinstance(e.value.__cause__, ValueError)


@pytest.mark.parametrize("error", [ValueError("weights file is empty"), OSError("no such model")])
def test_a_built_in_reward_s_error_is_raised_as_it_is(error: Exception) -> None:
    """A built-in's message is its own (it says what to do), and an OSError keeps its type."""
    with pytest.raises(type(error)) as e:
        reward_output("geneval", BuiltIn(error), IMAGES, ["a", "b"], [{}, {}])
    assert e.value is error


def test_a_message_that_names_the_reward_by_its_own_name_is_not_named_again() -> None:
    """The metric name may be the reward's spec (two rewards sharing a name): imgalign's check of what the reward
    returned names it by its `name`, and is not wrapped in a second naming."""
    own = ValueError("reward 'judge': got 2 images but 1 prompts")
    assert reward_failure("pkg.mod:judge", Judge(own), own, [{}]) is None


@pytest.mark.parametrize(
    ("metadata", "said"),
    [
        (None, "its prompts carry no metadata"),
        ([None, {"tag": "x"}], "its prompts' metadata rows hold the keys ['tag']"),
        ([{"a": 1}, {"b": 2}], "its prompts' metadata rows hold the keys ['a', 'b']"),
    ],
)
def test_a_key_error_hint_reads_every_metadata_row_and_takes_none(metadata: Any, said: str) -> None:
    failure = reward_failure("judge", Judge(KeyError("difficulty")), KeyError("difficulty"), metadata)
    assert failure is not None and said in str(failure), failure


def zed(images: torch.Tensor, prompts: list[str], metadata: Any = None) -> torch.Tensor:
    return torch.zeros(len(prompts))


def aye(images: torch.Tensor, prompts: list[str], metadata: Any = None) -> torch.Tensor:
    return torch.ones(len(prompts))


def test_build_rewards_pairs_each_metric_name_with_its_own_reward() -> None:
    """In the order of rewards.names (not sorted): reward/zed/... holds zed's scores."""
    from imgalign.trainers.rewarding import build_rewards, score_all

    here = "tests.test_mut_r24_rewarding"
    rewards = build_rewards([f"{here}:zed", f"{here}:aye"])
    assert list(rewards) == ["zed", "aye"]
    assert score_all(rewards, IMAGES, ["a", "b"], [{}, {}]).tolist() == [[0.0, 0.0], [1.0, 1.0]]

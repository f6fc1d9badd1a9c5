"""Bad-input round 36i: a plug-in reward balancer (``rewards.balancer: module:attr``) that returns NaN or infinite
advantages."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from imgalign.trainers.rewarding import Balanced, balance, build_balancer, weighted_sum

HERE = "tests.test_badinput_r36i_balancer_nan"


def nan_first(*args: Any) -> Balanced:
    b = weighted_sum(*args)
    b.advantages = b.advantages.clone()
    b.advantages[1] = float("nan")
    return b


def inf_all(*args: Any) -> Balanced:
    b = weighted_sum(*args)
    b.advantages = torch.full_like(b.advantages, float("inf"))
    return b


def nan_left_out(*args: Any) -> Balanced:
    b = nan_first(*args)
    b.valid = b.valid.clone()
    b.valid[1] = False
    return b


def _args() -> tuple:
    scores = torch.tensor([[0.1, 0.9, 0.3, 0.5]])
    return scores, torch.ones(1), torch.tensor([0, 0, 1, 1]), torch.ones(1, 4, dtype=torch.bool), "group", 5.0


@pytest.mark.parametrize(
    ("fn", "said"),
    [
        ("nan_first", "1 non-finite advantage(s) (NaN/inf) for samples it marks valid (e.g. sample 1: nan)"),
        ("inf_all", "4 non-finite advantage(s) (NaN/inf) for samples it marks valid (e.g. sample 0: inf)"),
    ],
)
def test_non_finite_advantages_of_valid_samples_are_refused_naming_the_balancer(fn: str, said: str) -> None:
    """A balancer's NaN advantage made the gradient NaN: the run went on to 'done' with every update skipped, and the
    warning named the rollout, a reward, the objective or the penalty, not the balancer (round 36i)."""
    name = f"{HERE}:{fn}"
    with pytest.raises(ValueError) as e:
        balance(name, build_balancer(name), *_args())
    assert str(e.value).startswith(
        f"reward balancer {name!r} returned {said}; an advantage must be finite, or its"
    )


def test_a_non_finite_advantage_of_a_sample_marked_invalid_is_left_out_as_before() -> None:
    name = f"{HERE}:nan_left_out"
    bal = balance(name, build_balancer(name), *_args())
    assert not bal.valid[1] and bal.valid[[0, 2, 3]].all()

"""Mutation round 32k: trainers/objectives.add_penalty's non-finite check: one NaN among finite samples is
refused and counted as one, an inf as a NaN is; a NaN that comes of a non-finite reference velocity (v_ref) is
not the penalty's fault."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from imgalign.trainers.config import ObjectiveConfig
from imgalign.trainers.objectives import add_penalty

HERE = "tests.test_mut_r32k_penalty_nan"


def second_row_nan(v: torch.Tensor, v_ref: torch.Tensor) -> torch.Tensor:
    return v.flatten(1).mean(1) * torch.tensor([1.0, float("nan")])


def first_row_inf(v: torch.Tensor, v_ref: torch.Tensor) -> torch.Tensor:
    return v.flatten(1).mean(1) * torch.tensor([float("inf"), 1.0])


def distance(v: torch.Tensor, v_ref: torch.Tensor) -> torch.Tensor:
    return (v - v_ref).pow(2).flatten(1).mean(1)


def _penalised(name: str, v: torch.Tensor, v_ref: torch.Tensor) -> torch.Tensor:
    m: dict[str, Any] = {}
    cfg = ObjectiveConfig(penalty=name, penalty_weight=0.1)
    return add_penalty(cfg, torch.tensor(0.0), v, v_ref, torch.ones(2), m)


def test_one_nan_among_finite_samples_is_refused_and_counted_as_one() -> None:
    v = torch.rand(2, 3, requires_grad=True)
    with pytest.raises(ValueError, match=r"returned 1 non-finite value\(s\) \(NaN/inf\) for samples whose"):
        _penalised(f"{HERE}:second_row_nan", v, torch.ones(2, 3))


def test_an_infinite_penalty_is_refused_as_a_nan_one_is() -> None:
    v = torch.rand(2, 3, requires_grad=True)
    with pytest.raises(ValueError, match=r"returned 1 non-finite value\(s\) \(NaN/inf\)"):
        _penalised(f"{HERE}:first_row_inf", v, torch.ones(2, 3))


def test_a_nan_of_a_non_finite_reference_velocity_is_not_the_penalty_s_fault() -> None:
    v = torch.rand(2, 3, requires_grad=True)
    v_ref = torch.tensor([[1.0, 1.0, 1.0], [float("nan"), 1.0, 1.0]])
    loss = _penalised(f"{HERE}:distance", v, v_ref)  # the reference model's NaN: the trainer names that
    assert not torch.isfinite(loss)

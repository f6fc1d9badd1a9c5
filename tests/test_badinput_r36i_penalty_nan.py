"""Bad-input round 36i: a plug-in velocity penalty (``objective.penalty: module:attr``) that returns NaN."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from imgalign.trainers.config import ObjectiveConfig
from imgalign.trainers.objectives import add_penalty

HERE = "tests.test_badinput_r36i_penalty_nan"


def nan_penalty(v: torch.Tensor, v_ref: torch.Tensor) -> torch.Tensor:
    return v.flatten(1).mean(1) * float("nan")


def second_row_nan(v: torch.Tensor, v_ref: torch.Tensor) -> torch.Tensor:
    return v.flatten(1).mean(1) * torch.tensor([1.0, float("nan")])


def _penalised(name: str, v: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
    m: dict[str, Any] = {}
    v_ref = torch.ones(2, 3)
    return add_penalty(
        ObjectiveConfig(penalty=name, penalty_weight=0.1), torch.tensor(0.0), v, v_ref, w, m
    ), m


def test_a_penalty_that_is_nan_for_finite_velocities_is_refused_naming_it() -> None:
    """A NaN penalty made every update skip for a non-finite gradient; the run ended 'done' with nothing trained, and
    the warning named the rollout, a reward, the objective or the penalty alike (round 36i)."""
    v = torch.rand(2, 3, requires_grad=True)
    with pytest.raises(ValueError) as e:
        _penalised(f"{HERE}:nan_penalty", v, torch.ones(2))
    assert str(e.value) == (
        f"objective.penalty '{HERE}:nan_penalty' returned 2 non-finite value(s) (NaN/inf) for samples whose "
        "velocities are finite; a velocity penalty returns a finite value per sample: fix it there"
    )


def test_a_nan_penalty_of_a_left_out_sample_or_of_a_non_finite_velocity_is_not_the_penalty_s_fault() -> None:
    v = torch.rand(2, 3, requires_grad=True)
    loss, m = _penalised(f"{HERE}:second_row_nan", v, torch.tensor([1.0, 0.0]))  # row 1 has weight 0
    assert torch.isfinite(loss) and m["policy/penalty"] == pytest.approx(float(v[0].detach().mean()))
    diverged = torch.tensor([[0.5, 0.5, 0.5], [float("nan"), 0.0, 0.0]], requires_grad=True)
    _penalised(f"{HERE}:second_row_nan", diverged, torch.ones(2))  # the rollout's NaN: the trainer names that


def test_a_built_in_penalty_of_velocities_whose_norm_overflows_is_not_blamed() -> None:
    """Finite velocities so large that their norm overflows float32 (a diverging policy) make the built-in vnorm
    penalty infinite: that was refused as the penalty's fault ("fix it there", of a built-in); the trainer's skipped
    update names the divergence instead."""
    v = torch.full((2, 3), 1e30, requires_grad=True)
    loss, m = _penalised("vnorm_squared", v, torch.ones(2))
    assert not torch.isfinite(loss) and m["policy/penalty"] == float("inf")

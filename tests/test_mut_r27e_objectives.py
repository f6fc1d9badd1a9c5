"""Mutation round 27 (helper e): objectives.py contracts that no test pinned: a penalty evaluated without gradients
(v_θ without a graph, e.g. a loss computed under torch.no_grad() for a diagnostic) is not refused as graphless, and
check_loss takes any one-element loss with a graph ([1] as well as [])."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from imgalign.trainers.config import ObjectiveConfig
from imgalign.trainers.objectives import add_penalty, check_loss


def test_a_penalty_under_no_grad_is_added_not_refused_as_graphless():
    """v_θ without a graph (no_grad evaluation): the vnorm hinge has no graph either, and that is no error; the loss
    gets λ·mean(hinge). Rows: ‖(3, 4)‖/‖(1, 0)‖ − 1 = 4 and ‖(0.5, 0)‖/1 − 1 < 0 -> 0; mean 2, λ 0.5 -> 1."""
    v = torch.tensor([[3.0, 4.0], [0.5, 0.0]])
    v_ref = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    m: dict[str, Any] = {}
    cfg = ObjectiveConfig(penalty="vnorm", penalty_weight=0.5)
    with torch.no_grad():
        loss = add_penalty(cfg, torch.tensor(0.25), v, v_ref, torch.ones(2), m)
    assert float(loss) == pytest.approx(1.25) and m["policy/penalty"] == pytest.approx(2.0)


@pytest.mark.parametrize("shape", [(), (1,), (1, 1)])
def test_check_loss_takes_any_one_element_loss_with_a_graph(shape):
    """A one-element loss of any shape backpropagates like a scalar, so check_loss passes it through unchanged."""
    p = torch.tensor(2.0, requires_grad=True)
    loss = (p * 3).reshape(shape)
    out, numbers = check_loss("mine", (loss, {"policy/loss": torch.tensor([1.5])}))
    assert out is loss and numbers == {"policy/loss": 1.5}

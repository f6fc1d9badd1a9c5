"""Mutation round 21, second pass (stop 58): the objective and penalty contracts checked without a model:
build_objective's refusals, check_loss's scalar-with-a-graph rule, and add_penalty's weight-0 shortcut, refusal
of a graphless penalty, argument order and detached reference (the tiny-SD3 train tests of these take minutes)."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
import torch

from imgalign.trainers.config import ObjectiveConfig, SamplingConfig
from imgalign.trainers.objectives import GRPOObjective, add_penalty, build_objective, check_loss
from imgalign.trainers.registry import OBJECTIVES


class _TermsOnly:
    def __init__(self, cfg: Any, sampling: Any) -> None:
        self.cfg = cfg

    def terms(self, rollout: Any) -> list[int]:
        return [0]


def test_build_objective_builds_a_registered_class_with_cfg_and_sampling():
    """The built-in grpo is built as GRPOObjective(cfg, sampling) and keeps both."""
    cfg, s = ObjectiveConfig(kl_beta=0.1), SamplingConfig()
    obj = build_objective("grpo", cfg, s)
    assert isinstance(obj, GRPOObjective) and obj.cfg is cfg and obj.sampling is s


def test_build_objective_refuses_an_instance_and_a_class_without_loss_by_name(monkeypatch):
    """A registered non-callable (an instance) is 'not a class'; a class without ``loss`` names the missing
    method; both name the objective."""
    monkeypatch.setitem(OBJECTIVES._items, "r21b_instance", object())
    monkeypatch.setitem(OBJECTIVES._items, "r21b_terms_only", _TermsOnly)
    with pytest.raises(ValueError, match=r"objective 'r21b_instance' is of type object, not a class"):
        build_objective("r21b_instance", ObjectiveConfig(), SamplingConfig())
    with pytest.raises(
        ValueError, match=r"'r21b_terms_only' built a _TermsOnly without the method\(s\) loss:"
    ):
        build_objective("r21b_terms_only", ObjectiveConfig(), SamplingConfig())


def test_build_objective_refuses_a_class_that_lacks_terms(monkeypatch):
    """``terms`` is required as ``loss`` is: a class with only ``loss`` names terms."""

    class LossOnly:
        def __init__(self, cfg: Any, sampling: Any) -> None:
            pass

        def loss(self, *args: Any) -> Any:
            return None

    monkeypatch.setitem(OBJECTIVES._items, "r21b_loss_only", LossOnly)
    with pytest.raises(ValueError, match=r"without the method\(s\) terms:"):
        build_objective("r21b_loss_only", ObjectiveConfig(), SamplingConfig())


def test_check_loss_refuses_a_per_sample_loss_and_a_loss_without_a_graph():
    """loss(...) must give one scalar with a graph: a [2] loss and a detached scalar are refused by name."""
    w = torch.ones(2, requires_grad=True)
    with pytest.raises(
        ValueError, match=r"'mine': loss\(...\) returned the loss as a tensor of shape \(2,\)"
    ):
        check_loss("mine", (w * 2, {}))
    with pytest.raises(ValueError, match=r"returned the loss as float"):
        check_loss("mine", (1.0, {}))
    with pytest.raises(ValueError, match=r"'mine': loss\(...\) returned a loss without a graph"):
        check_loss("mine", (torch.ones(()), {}))
    with pytest.raises(ValueError, match=r"loss\(...\) returned a Tensor; it must return \(loss, metrics\)"):
        check_loss("mine", w.sum())


def _pen_module(monkeypatch: pytest.MonkeyPatch) -> str:
    mod = types.ModuleType("my_lab_pen_r21b")
    mod.constant = lambda v, v_ref: torch.full((v.shape[0],), float("nan"))
    mod.first = lambda v, v_ref: v[:, 0] - 0.5 * v_ref[:, 0]  # not symmetric in its arguments
    monkeypatch.setitem(sys.modules, "my_lab_pen_r21b", mod)
    return "my_lab_pen_r21b"


def test_a_penalty_without_a_graph_is_refused_and_weight_zero_skips_the_penalty(monkeypatch):
    """A penalty that returns a constant (here NaN) cannot train: refused by name when v_θ has a graph. With
    objective.penalty_weight 0 the penalty is not computed at all: the loss stays as it was (no NaN) and no
    policy/penalty is logged."""
    name = _pen_module(monkeypatch)
    v = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    v_ref, w = torch.ones(2, 2), torch.ones(2)
    cfg = ObjectiveConfig(penalty=f"{name}:constant", penalty_weight=0.5)
    with pytest.raises(ValueError, match=rf"penalty '{name}:constant' returned a tensor without a graph"):
        add_penalty(cfg, torch.zeros(()), v, v_ref, w, {})
    m: dict[str, Any] = {}
    off = ObjectiveConfig(penalty=f"{name}:constant", penalty_weight=0.0)
    loss = add_penalty(off, torch.tensor(0.25), v, v_ref, w, m)
    assert float(loss) == 0.25 and "policy/penalty" not in m and "policy/vnorm_ratio" in m


def test_the_penalty_is_called_as_penalty_v_theta_v_ref_and_sends_no_gradient_into_the_reference(monkeypatch):
    """add_penalty calls the penalty with (v_θ, v_ref) in that order (rows: 1 − 0.5·2 = 0 and 3 − 0.5·1 = 2.5,
    mean 1.25 at weight 1), and a reference velocity that carries a graph gets no gradient from it."""
    name = _pen_module(monkeypatch)
    v = torch.tensor([[1.0, 0.0], [3.0, 0.0]], requires_grad=True)
    v_ref = torch.tensor([[2.0, 0.0], [1.0, 0.0]], requires_grad=True)
    m: dict[str, Any] = {}
    cfg = ObjectiveConfig(penalty=f"{name}:first", penalty_weight=1.0)
    loss = add_penalty(cfg, torch.zeros(()), v, v_ref, torch.ones(2), m)
    assert float(loss.detach()) == pytest.approx(1.25) and m["policy/penalty"] == pytest.approx(1.25)
    loss.backward()
    assert v_ref.grad is None
    torch.testing.assert_close(v.grad, torch.tensor([[0.5, 0.0], [0.5, 0.0]]))


def test_a_micro_batch_with_no_valid_row_adds_a_zero_penalty_not_nan():
    """Every row masked (weights 0, e.g. a tree parent whose edges are all masked): the penalty term and the
    logged penalty and norm ratio are 0, not 0/0 = NaN that would poison the update."""
    v = torch.tensor([[3.0, 0.0], [0.0, 2.0]], requires_grad=True)
    m: dict[str, Any] = {}
    cfg = ObjectiveConfig(penalty="vnorm", penalty_weight=0.5)
    loss = add_penalty(cfg, torch.zeros(()), v, torch.ones(2, 2), torch.zeros(2), m)
    assert float(loss.detach()) == 0.0 and m["policy/penalty"] == 0.0 and m["policy/vnorm_ratio"] == 0.0
    loss.backward()
    assert torch.isfinite(v.grad).all()

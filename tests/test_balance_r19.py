"""Round 19 (stop 56): build_balancer's argument-count check, MARBLE with one reward, and survivors of the
hand-written mutations of imgalign.trainers.balance."""

from __future__ import annotations

import logging
import sys
import uuid
from pathlib import Path

import pytest
import torch

from imgalign.trainers.balance import RewardBalancing
from imgalign.trainers.objectives import LossHead
from imgalign.trainers.rewarding import BALANCER_CONTRACT, build_balancer

torch.set_num_threads(1)


def _user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> str:
    """A fresh importable module holding `body`; returns its name."""
    name = f"balr19_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


@pytest.mark.parametrize(
    "signature",
    [
        "rewards, weights, group_ids, finite, std_mode",  # five: one short
        "rewards, weights, group_ids, finite, std_mode, adv_clip, extra",  # seven required: one too many
        "",  # none
    ],
)
def test_build_balancer_refuses_a_user_balancer_that_cannot_take_six_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signature: str
) -> None:
    mod = _user_module(tmp_path, monkeypatch, f"def bal({signature}):\n    return None\n")
    with pytest.raises(ValueError) as e:
        build_balancer(f"{mod}:bal")
    msg = str(e.value)
    assert f"reward balancer '{mod}:bal' cannot be called as one" in msg
    assert BALANCER_CONTRACT in msg


def test_build_balancer_refuses_a_user_balancer_that_is_not_callable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mod = _user_module(tmp_path, monkeypatch, "bal = 3\n")
    with pytest.raises(ValueError, match="it is of type int, not callable"):
        build_balancer(f"{mod}:bal")


@pytest.mark.parametrize(
    "signature",
    [
        "rewards, weights, group_ids, finite, std_mode, adv_clip",
        "rewards, weights, group_ids, finite, std_mode='group', adv_clip=5.0, extra=None",
        "*args",
    ],
)
def test_build_balancer_returns_a_user_balancer_that_takes_six_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signature: str
) -> None:
    mod = _user_module(tmp_path, monkeypatch, f"def bal({signature}):\n    return 'mine'\n")
    fn = build_balancer(f"{mod}:bal")
    assert fn(*[None] * 6) == "mine"


@pytest.mark.parametrize("name", ["weighted_sum", "gdpo", "group_norm_weighted", "marble"])
def test_build_balancer_returns_every_built_in(name: str) -> None:
    from imgalign.trainers.registry import BALANCERS

    assert build_balancer(name) is BALANCERS.get(name)


def test_build_balancer_refuses_an_unknown_name_with_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="unknown reward balancer 'nope'.*gdpo.*marble"):
        build_balancer("nope")


def _counting_head(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, calls: list[int]) -> LossHead:
    """A GRPO-like LossHead (v = x W^T, policy loss mean_i(-s_i <v_i, z_i>)) that counts its policy-loss calls."""
    v = x @ weight.T

    def policy(s: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        calls.append(1)
        return (-s * (v * z).sum(1)).mean(), {}

    return LossHead(v, lambda a: a.float(), policy, torch.zeros(()), {})


@pytest.mark.parametrize("space", ["output", "params"])
def test_marble_with_one_reward_warns_once_and_spends_no_gradient_probe(
    caplog: pytest.LogCaptureFixture, space: str
) -> None:
    """balancer: marble with a single reward: alpha is [1] whatever the gradients, so the Gram probes (K autograd
    calls, or K backward passes in params space) bought nothing. The run is told once, when the balancing is
    built, and each micro-batch forms only its training loss, which is the plain single-reward loss."""
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(5, 6))
    per = torch.randn(4, 1)
    with caplog.at_level(logging.WARNING, logger="imgalign.trainers.balance"):
        rb = RewardBalancing(["only"], marble=True, diagnose=False, space=space)
        for _ in range(3):
            rb.start_update()
            assert not rb.solving
            calls: list[int] = []
            x, z = torch.randn(4, 6), torch.randn(4, 5)
            loss, _ = rb.micro_loss(_counting_head(x, z, weight, calls), per, per[:, 0], [weight])
            assert len(calls) == 1  # the training loss only: no per-reward probe
            torch.testing.assert_close(loss, (-per[:, 0] * ((x @ weight.T) * z).sum(1)).mean())
            rb.end_update()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "'only'" in warned[0] and "one reward" in warned[0], warned
    m = rb.step_metrics()
    assert m["balance/alpha/only"] == 1.0 and m["balance/coef/only"] == 1.0
    assert rb.updates == 3


def test_zero_std_ratio_of_a_single_group_is_its_own_tie():
    """One prompt group: the share is 1 when its values tie and 0 when they do not (not halved by a floor of two
    groups in the denominator)."""
    from imgalign.trainers.balance import zero_std_ratio

    one = torch.zeros(3, dtype=torch.long)
    assert zero_std_ratio(torch.tensor([0.5, 0.5, 0.5]), one) == 1.0
    assert zero_std_ratio(torch.tensor([0.5, 0.5, 0.7]), one) == 0.0


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("k", [2, 3])
def test_min_norm_simplex_refuses_a_gram_with_one_non_finite_entry(bad: float, k: int):
    """A single overflowed cross term among finite ones is refused by name, not solved (K = 2 closed form and
    the K = 3 enumeration alike)."""
    from imgalign.trainers.balance import min_norm_simplex

    gram = torch.eye(k, dtype=torch.float64)
    gram[0, 1] = gram[1, 0] = bad
    with pytest.raises(ValueError, match="gram has non-finite entries"):
        min_norm_simplex(gram)


def test_marble_coefficients_fall_back_to_uniform_when_every_gradient_norm_is_zero():
    """A state whose gradient norms are all 0 (every reward's gradient vanished) leaves no weight to normalise: the
    coefficients fall back to uniform (summing to 1, as mix's [0, 1] range needs), not to all zeros, which would
    train on a constant signal."""
    from imgalign.trainers.balance import MarbleBalancer

    mb = MarbleBalancer(2, names=["a", "b"])
    mb.load_state_dict({"alpha": [0.3, 0.7], "grad_norms": [0.0, 0.0], "steps": 1, "names": ["a", "b"]})
    assert mb.coefficients().tolist() == [0.5, 0.5]
    r = torch.tensor([[0.2, 0.8], [1.0, 0.0]])
    torch.testing.assert_close(mb.mix(r), torch.tensor([0.5, 0.5]))

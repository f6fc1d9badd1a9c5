"""Round 19 (stop 56): build_balancer's argument-count check, MARBLE with one reward, and survivors of the
hand-written mutations of imgalign.trainers.balance."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

from imgalign.trainers.rewarding import BALANCER_CONTRACT, build_balancer


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
    with pytest.raises(ValueError, match="it is a int, not callable"):
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

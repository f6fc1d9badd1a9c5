"""A reward option of listed choices (a ``Literal`` annotation) is checked before anything loads."""

from __future__ import annotations

from typing import Literal

import pytest

from imgalign.cli import main
from imgalign.rewards.base import check_factory_options, check_reward_options


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("geneval:mode=bogus", "reward 'geneval': option mode='bogus' is not one of strict, partial, soft"),
        ("fid:mode=groups", "reward 'fid': option mode='groups' is not one of sample, group"),
    ],
)
def test_an_unlisted_choice_is_refused_by_name(spec: str, said: str) -> None:
    with pytest.raises(ValueError, match=f"^{said}$"):
        check_reward_options(spec)


@pytest.mark.parametrize("spec", ["geneval", "geneval:mode=strict", "fid:mode=group"])
def test_a_listed_choice_passes(spec: str) -> None:
    check_reward_options(spec)


def test_print_config_refuses_it_as_the_run_does(capsys: pytest.CaptureFixture[str]) -> None:
    # --print-config showed the config as fine; the run refused the value when it built the reward
    assert main(["train", "--print-config", "--set", "rewards.names=geneval:mode=bogus"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "option mode='bogus' is not one of strict, partial, soft" in captured.err


def test_a_plug_in_factory_with_a_literal_option_is_checked_and_unresolvable_annotations_are_left_alone() -> (
    None
):
    def judge(level: Literal["low", "high"] = "low", **kwargs: object) -> None:
        """A plug-in reward factory (it takes device and dtype through kwargs)."""

    check_factory_options("judge", judge, {"level": "high"})
    with pytest.raises(ValueError, match=r"option level='mid' is not one of low, high"):
        check_factory_options("judge", judge, {"level": "mid"})

    def odd(level: NoSuchType = "x", **kwargs: object) -> None:  # type: ignore[name-defined]  # noqa: F821
        """Annotations that do not resolve: the factory's own build checks its options."""

    check_factory_options("odd", odd, {"level": "y"})

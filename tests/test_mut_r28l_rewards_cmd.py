"""Mutation round 28l: `imgalign rewards check` on a class that is no Reward and declares nothing of the prompt."""

from __future__ import annotations

import sys
import types

import pytest

from imgalign.cli import main


def test_check_takes_a_class_without_needs_prompt_as_reading_the_prompt(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a class that declares ``needs_prompt = False`` is refused as prompt-free before it is built: a class
    that says nothing (here no Reward subclass) goes on to be built, and its own error names what is wrong."""

    class Plain:  # takes device and dtype, so it is called as a factory; it returns no Reward
        def __init__(self, device: str = "cpu", dtype: object = None) -> None:
            pass

    mod = types.ModuleType("my_lab.r28l_plain")
    mod.Plain = Plain
    monkeypatch.setitem(sys.modules, "my_lab.r28l_plain", mod)
    monkeypatch.setattr(
        "imgalign.rewards.sanity.true_vs_corrupted", lambda *a, **k: pytest.fail("the check ran")
    )
    assert main(["rewards", "check", "--reward", "my_lab.r28l_plain:Plain", "--n", "4"]) == 2
    err = capsys.readouterr().err
    assert "does not read the prompt" not in err
    assert "not a Reward" in err

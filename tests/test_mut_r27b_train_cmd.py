"""Mutation round 27 (commands/train.py): behaviour the earlier tests let a mutant change unseen."""

from __future__ import annotations

import pytest

from imgalign.cli import main


@pytest.mark.parametrize("flags", [["--print-config"], ["--describe"]])
def test_max_steps_zero_is_refused_not_dropped(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """`--max-steps 0` is a value given (the config refuses it), not an absent flag: read as "not given", it ran the
    config's train.max_steps (100 for the default) and --describe listed the defaults as if nothing were set."""
    assert main(["train", "--max-steps", "0", *flags]) == 2
    assert "train.max_steps must be >= 1 (got 0)" in capsys.readouterr().err

"""Mutation round 19: `imgalign rewards` (imgalign/commands/rewards_cmd.py)."""

from __future__ import annotations

import pytest

from imgalign.cli import main


@pytest.mark.parametrize("blank", ["", " ", "\t"])
def test_an_fd_argument_of_blanks_is_named_as_empty(blank: str, capsys: pytest.CaptureFixture) -> None:
    """An fd argument of blanks is named as empty, as "" is (an unset shell variable?), before any encoder loads,
    not as a folder that does not exist."""
    assert main(["rewards", "fd", blank, "shapes", "--features", "stats"]) == 2
    assert "an fd argument is empty" in capsys.readouterr().err

"""Round 23 mutation tests of imgalign.cli and imgalign.commands: what `main` returns to an in-process caller."""

from __future__ import annotations

import pytest

from imgalign.cli import main


@pytest.mark.parametrize(("handed", "status"), [(None, 0), (True, 1), (False, 0), (3, 3)])
def test_main_returns_an_int_exit_status_whatever_the_handler_returned(
    monkeypatch: pytest.MonkeyPatch, handed: object, status: int
) -> None:
    """A handler's None (a command that returns nothing) is status 0 and a bool is 0 or 1: an in-process caller
    (and sys.exit, which prints anything that is not an int) gets an int."""
    from imgalign.commands import report

    monkeypatch.setattr(report, "run_report", lambda args: handed)
    got = main(["report", "run"])
    assert got == status and type(got) is int

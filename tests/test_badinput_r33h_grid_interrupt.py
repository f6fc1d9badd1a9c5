"""`imgalign grid` stopped by Ctrl-C or SIGTERM said only "imgalign grid: interrupted": not whether a part of the
grid was saved (none is: it is written whole at the end) nor what to do."""

from __future__ import annotations

import pytest

from imgalign.cli import Interrupted, main


def test_an_interrupted_grid_says_nothing_was_written_and_what_to_do(monkeypatch) -> None:
    import imgalign.commands.grid as grid

    def stopped(args) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(grid, "run_grid", stopped)
    with pytest.raises(Interrupted) as got:
        main(["grid", "--model", "a=shapes", "--prompt", "a circle", "--out", "g.png"])
    assert str(got.value) == (
        "imgalign grid: interrupted; nothing was written (the grid is saved whole at the end): run the same "
        "command again"
    )

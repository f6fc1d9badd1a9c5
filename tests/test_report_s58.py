"""`imgalign report --x ""` (an unset shell variable) is refused as empty (stop 58; carried from stop 57)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.cli import main


def test_report_refuses_an_empty_x_naming_what_it_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--x "$X" with X unset reached the runs and was answered "no run logs ''" with their keys, as if '' were a
    metric; it is refused as empty before any run is read, as --out "" is."""
    monkeypatch.chdir(tmp_path)
    argv = ["report", "--compare", "a=missing_run", "--keys", "reward/mean", "--out", "cmp", "--x", ""]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--x is empty (an unset shell variable?): give step, or a counter the runs log such as " in err
    assert "missing_run" not in err and not (tmp_path / "cmp").exists()

"""Bad input, round 35i: `imgalign score --out X.csv` writes a prompt that begins with "=" (a formula to a
spreadsheet) as it is. Escaping it (a leading "'") would change the prompt for every CSV reader (pandas, csv) and
could not tell a negative score from a formula, so the cells stay as they are and --help says so."""

from __future__ import annotations

import pytest

from imgalign.cli import main


def test_score_help_says_csv_cells_are_not_escaped_for_spreadsheets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["score", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "CSV cells are written as they are, not escaped for spreadsheets" in text
    assert "begins with =, +, - or @ is read as a formula" in text

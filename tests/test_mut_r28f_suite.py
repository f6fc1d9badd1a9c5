"""eval/suite.py (mutation round 28f): a failure row of report.md stays one table row of three cells when its
prompt holds a '|' and its reason spans lines."""

from __future__ import annotations

from imgalign.eval.suite import render_report, table_cell


def test_a_failure_whose_prompt_holds_a_bar_stays_three_cells_of_one_row() -> None:
    """A '|' in a prompt is written as '/', and a reason of two lines is joined with '; ': the failure is one line of
    the table with three cells. The '|' kept split the prompt into a fourth cell."""
    summary = {"suite": "s", "model": "m", "overall": 0.0, "n_images": 1, "tasks": {"colors": 0.0}}
    rows = [
        {
            "file": "00000/samples/0000.png",
            "prompt": "a red | blue circle",
            "tag": "colors",
            "correct": False,
            "reason": "expected red circle>=1, found 0 red\nexpected blue circle>=1, found 0",
        }
    ]
    lines = render_report(summary, rows).splitlines()
    row = lines[-1]
    assert row == (
        "| 00000/samples/0000.png | a red / blue circle | expected red circle>=1, found 0 red; "
        "expected blue circle>=1, found 0 |"
    )
    assert row.count("|") == 4
    assert table_cell("a|b\nc") == "a/b; c"

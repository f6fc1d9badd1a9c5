"""Bad-input round 20: `imgalign eval` with odd prompt texts."""

from __future__ import annotations


def test_a_prompt_with_a_line_break_or_a_bar_stays_in_its_report_table_row() -> None:
    """A GenEval prompt "line one\\nline two" (valid JSON) ended its failure row in report.md after "line one",
    leaving "line two | reason |" as a stray line; a '|' in a prompt split the row into more columns. Only the
    judge's reason was made safe for the table."""
    from imgalign.eval.suite import render_report

    summary = {"suite": "shapes", "model": "m", "overall": 0.0, "n_images": 2, "tasks": {"colors": 0.0}}
    rows = [
        {"file": "00000/samples/0000.png", "tag": "colors", "prompt": "line one\nline two", "correct": False,
         "reason": "expected circle>=1, found 0"},
        {"file": "00001/samples/0000.png", "tag": "colors", "prompt": "a red | blue circle\r\n", "correct": False,
         "reason": "r"},
    ]  # fmt: skip
    table = render_report(summary, rows).splitlines()[-2:]
    assert table == [
        "| 00000/samples/0000.png | line one; line two | expected circle>=1, found 0 |",
        "| 00001/samples/0000.png | a red / blue circle | r |",
    ]

"""Mutation round 26 (helper C): behaviour of imgalign.sampling that no test pinned."""

from __future__ import annotations

from imgalign.sampling import long_rows_warning


def test_eleven_long_rows_show_ten_and_one_more_and_ten_show_all() -> None:
    """The long-prompt line lists at most ten rows and counts the rest: eleven long rows are ten names and "and 1
    more", ten are all ten names with no count. With the cut at more than eleven rows (`> 11`), the eleventh row
    vanished from the line without a count: the user read ten truncated rows where there were eleven."""
    prompts = [f"p{i}" for i in range(11)]
    over = {p: ("CLIP", 80) for p in prompts}
    line = long_rows_warning("m", prompts, over, "CLIP 77")
    assert line.startswith(
        "m: the prompts of rows 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 1 more (row 1: 80 CLIP tokens)"
    )
    line = long_rows_warning("m", prompts[:10], {p: over[p] for p in prompts[:10]}, "CLIP 77")
    assert line.startswith("m: the prompts of rows 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 (row 1: 80 CLIP tokens) are")

"""rewards.base edges no earlier test pinned down (round 20's mutant B36, left untested by round 21)."""

from __future__ import annotations

from imgalign.rewards.base import excerpt


def test_excerpt_keeps_a_word_that_ends_right_at_the_cut_whole() -> None:
    """width 14 keeps 10 characters before " ...": 'abcde fghi' ends at the cut, so it is kept whole (a search
    for the space before the cut only gave 'abcde ...'); one character more is cut back to the word before."""
    assert excerpt("abcde fghi jklmn", 14) == "abcde fghi ..."
    assert excerpt("abcde fghij klmn", 14) == "abcde ..."
    assert excerpt("abcde   fghi\njklmn", 14) == "abcde fghi ..."

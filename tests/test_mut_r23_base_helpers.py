"""rewards.base helpers (excerpt, reward specs and options) at the edges round 23's mutants left open."""

from __future__ import annotations

from imgalign.rewards.base import excerpt


def test_a_text_exactly_as_wide_as_the_cut_is_kept_whole() -> None:
    """A prompt of exactly `width` characters fits: it is kept as it is, not cut to " ..." (B35)."""
    assert excerpt("abcdefghij", 10) == "abcdefghij"
    assert excerpt("abcd fghij", 10) == "abcd fghij"
    assert excerpt("abcdefghijk", 10) == "abcdef ..."


def test_a_space_in_the_first_half_of_the_cut_is_not_cut_at() -> None:
    """Cutting at a space that leaves less than half the room would throw most of the text away: the cut falls
    mid-word instead (B38)."""
    assert excerpt("ab cdefghijklmnop", 10) == "ab cde ..."
    assert excerpt("abcd efghijklmnop", 10) == "abcd ..."

"""rewards.base edges no earlier test pinned down (round 20's mutant B36, left untested by round 21)."""

from __future__ import annotations

from imgalign.rewards.base import excerpt


def test_excerpt_keeps_a_word_that_ends_right_at_the_cut_whole() -> None:
    """width 14 keeps 10 characters before " ...": 'abcde fghi' ends at the cut, so it is kept whole (a search
    for the space before the cut only gave 'abcde ...'); one character more is cut back to the word before."""
    assert excerpt("abcde fghi jklmn", 14) == "abcde fghi ..."
    assert excerpt("abcde fghij klmn", 14) == "abcde ..."
    assert excerpt("abcde   fghi\njklmn", 14) == "abcde fghi ..."


def test_a_reward_option_naming_a_folder_keys_the_same_with_or_without_a_trailing_slash(
    tmp_path, monkeypatch
):
    """clip:model=DIR/ (a shell's completion) and clip:model=DIR were two score columns, so a --baseline written
    with the other spelling did not pair; they are one key now. A name that is no folder (a Hub id) stays as
    written, and no path is made absolute."""
    from imgalign.rewards.base import reward_key

    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_clip").mkdir()
    assert reward_key("clip:model=my_clip/") == reward_key("clip:model=my_clip") == "clip:model=my_clip"
    assert reward_key("clip:model=my_clip//") == "clip:model=my_clip"
    assert reward_key(f"clip:model={tmp_path}/my_clip/") == f"clip:model={tmp_path}/my_clip"
    assert reward_key("clip:model=org/not_here/") == "clip:model=org/not_here/"

"""Mutation round 27c: rewards/base.py behaviour no earlier test pinned."""

import pytest

from imgalign.rewards.base import check_reward_options


def test_a_spelling_hint_is_given_only_when_one_option_is_unknown() -> None:
    """With several unknown options a "did you mean" for the first one alone would read as the whole answer."""
    with pytest.raises(ValueError) as one:
        check_reward_options("clip:wieght=2")
    assert "unknown option(s) wieght (did you mean 'weight'?); its options: " in str(one.value)
    with pytest.raises(ValueError) as two:
        check_reward_options("clip:wieght=2,zzz=1")
    assert "unknown option(s) wieght, zzz; its options: " in str(two.value)
    assert "did you mean" not in str(two.value)

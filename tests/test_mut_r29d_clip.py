"""Mutation round 29 (helper d): rewards/clip.py survivors."""

from __future__ import annotations

import pytest

from imgalign.rewards.clip import check_open_clip_name


def test_a_misspelt_architecture_in_capitals_still_lists_the_close_names() -> None:
    """The close names are found case-blind: 'VIT-B-23' (capitals) names ViT-B-32 as 'vit-b-23' does."""
    with pytest.raises(ValueError, match=r"not an open_clip architecture \(close: ViT-B-32"):
        check_open_clip_name("VIT-B-23", None)

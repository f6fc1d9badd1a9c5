"""Mutation round 27c: rewards/heads.py behaviour no earlier test pinned."""

from pathlib import Path

import pytest

from imgalign.rewards.heads import FeatureHead, load_head, save_head


def test_a_head_with_a_negative_feature_scale_is_refused_as_damaged(tmp_path: Path) -> None:
    """A negative 'std' (a hand-edited file) flips the sign of every standardised feature, so the head would score
    silently inverted; it is refused as a zero one is."""
    head = FeatureHead(3)
    head.std.fill_(-1.0)
    path = tmp_path / "h.safetensors"
    save_head(path, head, "stats", "discriminator", {})
    with pytest.raises(
        ValueError, match=r"is a damaged imgalign feature head \(a feature scale 'std' <= 0\)"
    ):
        load_head(path)
    head.std.fill_(2.0)
    save_head(path, head, "stats", "discriminator", {})
    assert load_head(path)[0].std.tolist() == [2.0, 2.0, 2.0]

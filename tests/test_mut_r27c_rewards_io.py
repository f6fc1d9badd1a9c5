"""Mutation round 27c: rewards/io.py behaviour no earlier test pinned."""

import logging
from collections import Counter

import pytest

from imgalign.rewards.io import common_size


def test_images_of_one_size_are_not_said_to_be_resized(caplog: pytest.LogCaptureFixture) -> None:
    """The resize warning is for a folder of mixed sizes; one of a single size said "0 of 3 images ... resized"."""
    with caplog.at_level(logging.WARNING, logger="imgalign.rewards.io"):
        assert common_size(Counter({(8, 6): 3})) == (8, 6)
    assert caplog.records == []
    with caplog.at_level(logging.WARNING, logger="imgalign.rewards.io"):
        assert common_size(Counter({(8, 6): 2, (4, 4): 1})) == (8, 6)
    assert [r.getMessage() for r in caplog.records] == [
        "1 of 3 images are not 8x6 and were resized to it (bicubic)"
    ]

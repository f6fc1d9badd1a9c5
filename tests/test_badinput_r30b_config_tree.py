"""Bad-input round 30b: each of the tree's progressive-schedule settings refused under its own key, with the value."""

from __future__ import annotations

import pytest

from imgalign.config import ConfigError, load_config
from imgalign.trainers.config import FlowGRPOConfig


@pytest.mark.parametrize(
    ("setting", "wanted"),
    [
        (
            "sampling.tree.progressive_initial=0",
            r"sampling\.tree\.progressive_initial must be >= 1 \(got 0\)",
        ),
        (
            "sampling.tree.progressive_grow_every=-1",
            r"sampling\.tree\.progressive_grow_every must be >= 1 \(got -1\)",
        ),
        (
            "sampling.tree.progressive_grow_by=-2",
            r"sampling\.tree\.progressive_grow_by must be >= 0 \(got -2\)",
        ),
    ],
)
def test_a_bad_progressive_setting_is_named_with_its_value(setting: str, wanted: str) -> None:
    """One message covered the three ("sampling.tree.progressive_initial/grow_every must be >= 1 and grow_by >= 0"):
    it did not say which was wrong, named progressive_grow_every and progressive_grow_by by no full key, and gave
    no value."""
    with pytest.raises(ConfigError, match=wanted):
        load_config(FlowGRPOConfig, None, [setting])

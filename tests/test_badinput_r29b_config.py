"""Bad-input round 29 (second pass): one number where a list of numbers goes (``--set rewards.weights=2`` for
one reward) said "expected a list, got 2" and not how to write a list of one."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.config import ConfigError, load_config
from imgalign.trainers.config import FlowGRPOConfig


@pytest.mark.parametrize(("value", "one"), [("2", "[2]"), ("0.5", "[0.5]")])
def test_one_weight_on_the_command_line_says_how_to_write_a_list(value: str, one: str) -> None:
    with pytest.raises(
        ConfigError, match=rf"rewards.weights: expected a list, got .*write a list of one as \{one}"
    ):
        load_config(FlowGRPOConfig, None, [f"rewards.weights={value}"])


def test_one_weight_in_a_file_says_how_to_write_a_list(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("rewards:\n  weights: 3\n")
    with pytest.raises(
        ConfigError, match=r"got 3 \(write a list of one as \[3\], several as \[a, b\] or a,b\)"
    ):
        load_config(FlowGRPOConfig, config)


def test_a_mapping_for_a_list_gets_no_list_of_one_hint() -> None:
    with pytest.raises(ConfigError, match="rewards.weights is a list") as e:
        load_config(FlowGRPOConfig, None, ["rewards.names=[geneval, clip]", "rewards.weights={geneval: 1}"])
    assert "list of one" not in str(e.value)

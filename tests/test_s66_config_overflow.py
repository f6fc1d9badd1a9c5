"""A number typed with digits that overflows to infinity is refused by what was typed (stop 66; round 30d's note)."""

from __future__ import annotations

import re

import pytest

from imgalign.config import ConfigError, load_config
from imgalign.trainers.config import FlowGRPOConfig


@pytest.mark.parametrize("typed", ["1e400", "-1e400", "2.5E+999"])
def test_an_overflowing_number_is_named_as_typed(typed):
    with pytest.raises(
        ConfigError, match=rf"^train.lr: {re.escape(typed)} is further from 0 than the largest float"
    ) as e:
        load_config(FlowGRPOConfig, None, [f"train.lr={typed}"])
    assert "would be read as infinity; give one closer to 0" in str(e.value)


def test_the_same_in_a_config_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("train:\n  lr: 1e400\n")  # YAML 1.1 reads an exponent without a dot as text
    with pytest.raises(ConfigError, match=r"train.lr: 1e400 is further from 0 than the largest float"):
        load_config(FlowGRPOConfig, f, [])


def test_inf_written_as_inf_keeps_its_own_message():
    with pytest.raises(ConfigError, match=r"train.lr must be > 0 and finite \(got inf\)"):
        load_config(FlowGRPOConfig, None, ["train.lr=inf"])
    # a large finite number is no overflow (train.lr itself is bounded by float32: test_badinput_r36m_config)
    assert load_config(FlowGRPOConfig, None, ["train.grad_clip=1e308"]).train.grad_clip == 1e308

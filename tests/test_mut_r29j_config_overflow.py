"""A number typed in exponent notation that reads as infinity is refused by what was typed in an integer field too
(round 29j: the stop-66 check was for float fields only, so model.resolution=1e400 said "expected an integer, got
inf"; mutant 'tp is float' -> 'tp in (int, float)' survived). The message keeps the largest float's size."""

from __future__ import annotations

import pytest

from imgalign.config import ConfigError, load_config
from imgalign.trainers.config import FlowGRPOConfig


@pytest.mark.parametrize("setting", ["model.resolution=1e400", "train.lr=1e400"])
def test_an_overflowing_number_is_named_as_typed_in_any_number_field(setting):
    key, typed = setting.split("=")
    with pytest.raises(ConfigError) as e:
        load_config(FlowGRPOConfig, None, [setting])
    assert str(e.value) == (
        f"{key}: {typed} is further from 0 than the largest float (about 1.8e308) and would be read as infinity; "
        "give one closer to 0"
    )


def test_an_integer_field_still_takes_exponents_and_long_integers():
    assert load_config(FlowGRPOConfig, None, ["model.resolution=1e2"]).model.resolution == 100
    big = "1" + "0" * 400
    # read as the integer it is: refused by the seed's own range, not as infinity
    with pytest.raises(
        ConfigError, match=r"^prompts.seed must be an integer from 0 to 2\*\*63 - 1 \(got 1000"
    ):
        load_config(FlowGRPOConfig, None, [f"prompts.seed={big}"])
    with pytest.raises(ConfigError, match=r"model.resolution: expected an integer, got 'inf'"):
        load_config(FlowGRPOConfig, None, ["model.resolution=inf"])


@pytest.mark.parametrize("sign", ["+", "-", ""])
def test_a_signed_integer_too_large_for_a_float_keeps_its_own_message(sign):
    """'+1000…0' of 401 digits is an integer typed in digits: its own message, not the exponent one (round 29j
    mutant: the sign strip cut to '-' survived)."""
    with pytest.raises(ConfigError, match=r"^train.lr: expected a number, got an integer of 401 digits"):
        load_config(FlowGRPOConfig, None, [f"train.lr={sign}1{'0' * 400}"])

"""Mutation round 30 (helper d): a number field given a quoted integer too large for a float (a file's
``lr: "1000…0"``) is named as the integer typed, as an unquoted one is: float() reads the text as inf, so it was
reported as "train.lr must be > 0 and finite (got inf)", a value not typed (mutant: the padding strip in
_refuse_out_of_range, whose integer case had no message of its own for text)."""

from __future__ import annotations

import pytest

from imgalign.config import ConfigError, load_config
from imgalign.trainers.config import FlowGRPOConfig

BIG = "1" + "0" * 400


@pytest.mark.parametrize(
    "typed", [f'"{BIG}"', f'"-{BIG}"', f'" +{BIG} "', BIG], ids=["quoted", "negative", "padded", "unquoted"]
)
def test_a_quoted_integer_too_large_for_a_float_is_named_by_its_digits(tmp_path, typed):
    path = tmp_path / "c.yaml"
    path.write_text(f"train:\n  lr: {typed}\n")
    with pytest.raises(ConfigError) as e:
        load_config(FlowGRPOConfig, str(path), [])
    assert str(e.value) == (
        "train.lr: expected a number, got an integer of 401 digits, larger than any float (at most about 1.8e308)"
    )


def test_a_quoted_number_a_float_holds_is_still_read(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text('train:\n  lr: "3"\n')
    assert load_config(FlowGRPOConfig, str(path), []).train.lr == 3.0

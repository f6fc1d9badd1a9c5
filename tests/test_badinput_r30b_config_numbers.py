"""Bad-input round 30b: numbers beyond what a number setting can hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.config import ConfigError, load_config
from imgalign.trainers.config import FlowGRPOConfig

HUGE = (
    "1" + "0" * 400
)  # 10**400: YAML reads it as an int; float() of it overflows (a 401-digit float text is inf)


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        (f"train.lr={HUGE}", r"train\.lr"),
        (f"sampling.guidance_scale=-{HUGE}", r"sampling\.guidance_scale"),
        (f"rewards.weights=[1, {HUGE}]", r"rewards\.weights\[1\]"),
    ],
)
def test_an_integer_too_large_for_a_float_is_refused_by_key(setting: str, key: str) -> None:
    """A float setting given an integer of 309 digits or more failed with OverflowError's traceback ("int too
    large to convert to float") from inside the config code; now a ConfigError names the key and the size."""
    with pytest.raises(
        ConfigError, match=rf"^{key}: expected a number, got an integer of 401 digits, larger than"
    ):
        load_config(FlowGRPOConfig, None, [setting])


def test_the_same_in_a_file(tmp_path: Path) -> None:
    """A file's unquoted integer takes the same path (YAML reads it as an int)."""
    path = tmp_path / "c.yaml"
    path.write_text(f"train:\n  adam_eps: {HUGE}\n")
    with pytest.raises(
        ConfigError, match=r"^train\.adam_eps: expected a number, got an integer of 401 digits"
    ):
        load_config(FlowGRPOConfig, path)

"""Config reading fixed in stop 58 (left alone by round 25)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from imgalign.config import ConfigError, load_config


@dataclass
class _Cfg:
    steps: int = 1


def test_a_non_ascii_digit_in_an_integer_setting_is_not_told_to_remove_quotes() -> None:
    """steps=٣ (an Arabic-Indic three, which YAML reads as text) was told "a quoted number is text in YAML: remove
    the quotes", though nothing was quoted and removing nothing helps; only ASCII digits get that hint."""
    with pytest.raises(ConfigError) as e:
        load_config(_Cfg, None, ["steps=\u0663"])
    assert str(e.value) == "steps: expected an integer, got '\u0663'"
    with pytest.raises(ConfigError, match=r"got '5' \(a quoted number is text in YAML: remove the quotes\)$"):
        load_config(_Cfg, None, ["steps='5'"])

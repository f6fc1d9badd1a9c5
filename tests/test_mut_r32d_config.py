"""Mutation round 32d: imgalign/config.py behaviour no earlier test pinned."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from imgalign.config import ConfigError, load_config


@dataclass
class _Cfg:
    steps: int = 1


@pytest.mark.parametrize("text", ["-5", "+3", " 7 "])
def test_a_quoted_signed_or_padded_integer_is_told_to_remove_the_quotes(tmp_path, text):
    """A quoted integer with a sign or spaces around it is text to YAML as '5' is, and gets the same hint."""
    p = tmp_path / "c.yaml"
    p.write_text(f"steps: '{text}'\n")
    with pytest.raises(ConfigError) as e:
        load_config(_Cfg, p)
    assert (
        str(e.value)
        == f"steps: expected an integer, got {text!r} (a quoted number is text in YAML: remove the quotes)"
    )

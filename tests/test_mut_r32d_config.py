"""Mutation round 32d: imgalign/config.py behaviour no earlier test pinned."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from imgalign.config import ConfigError, check_built, field, load_config


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


@dataclass
class _Specs:
    specs: list[str] = field(default_factory=list, help="reward specs", reward_specs=True)


def test_a_block_form_options_null_and_booleans_are_written_as_yaml_writes_them(tmp_path):
    """A reward's options given as a mapping under its name become its spec with each value as YAML writes it:
    an empty value is null (Python's 'None' is text to YAML), and booleans set in Python are true and false."""
    p = tmp_path / "c.yaml"
    p.write_text("specs:\n  - geneval:\n      mode:\n      strict: true\n")
    assert load_config(_Specs, p).specs == ["geneval:mode=null,strict=true"]
    cfg = _Specs()
    cfg.specs = [{"geneval": {"strict": True, "mode": None, "x": False}}]
    check_built(cfg)
    assert cfg.specs == ["geneval:strict=true,mode=null,x=false"]


@pytest.mark.parametrize("written", ["0x1F", "010", "1.10"])
def test_an_unknown_numeric_key_is_named_as_written(tmp_path, written):
    """A key YAML reads as a number (hex, octal, a float's trailing 0) is named as the file writes it, not as
    YAML's number (31, 8, 1.1), which the user cannot find in the file."""
    p = tmp_path / "c.yaml"
    p.write_text(f"{written}: 3\n")
    with pytest.raises(ConfigError, match=f"unknown config key '{written}';"):
        load_config(_Cfg, p)


@pytest.mark.parametrize("text", ["train:\n  lr.x: 1\n", "foo.bar: 1\n", "train:\n  1.10: 3\n"])
def test_an_unknown_key_with_a_dot_in_the_config_file_names_the_file(tmp_path, text):
    """A file's unknown key that holds a dot itself (lr.x under a setting that is no section, a YAML 1.10) is named
    with the file, as any other key of the file is; its dotted path split it, and it was not found in the file."""
    from imgalign.trainers.config import FlowGRPOConfig

    p = tmp_path / "c.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=f"^config file {re.escape(repr(str(p)))}: unknown config key"):
        load_config(FlowGRPOConfig, p)

"""Mutation round 26c: the config checks of prompts.source=generate:SEED and of a dotted key in a config file."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.config import ConfigError, load_config
from imgalign.trainers.config import FlowGRPOConfig


def test_a_seed_in_other_digits_is_refused_under_prompts_source() -> None:
    """generate:١٢ (Arabic-Indic digits) passes str.isdigit() and int() reads it as 12: without the isascii check
    it was taken as another spelling of generate:12, which "digits only" exists to refuse."""
    with pytest.raises(
        ConfigError, match=r"prompts\.source: prompt set 'generate:١٢': expected generate:SEED"
    ):
        load_config(FlowGRPOConfig, None, ["prompts.source=generate:١٢"])


def test_a_minus_before_no_digits_is_not_called_a_negative_seed() -> None:
    """generate:-abc is no number at all: the "must be 0 or more" message is only for a minus before digits
    (generate:-1); a check on the minus alone told the user their seed was negative."""
    with pytest.raises(ConfigError) as info:
        load_config(FlowGRPOConfig, None, ["prompts.source=generate:-abc"])
    assert "expected generate:SEED with an integer seed (digits only)" in str(info.value)
    assert "0 or more" not in str(info.value)


def test_a_prompt_file_whose_name_starts_with_generate_is_no_seed() -> None:
    """The seed check is for the prefix `generate:` with its colon: a file named generated_prompts.txt is a
    prompts file (a check on `generate` alone split it at a colon it lacks and failed with IndexError)."""
    cfg = load_config(FlowGRPOConfig, None, ["prompts.source=generated_prompts.txt"])
    assert cfg.prompts.source == "generated_prompts.txt"


def test_a_dotted_key_under_a_setting_that_is_no_section_is_an_unknown_key(tmp_path: Path) -> None:
    """`train: {lr.x: 1}`: lr is a number, not a section, so the advice to nest "lr:, then x:" would be wrong;
    the dots hint is only for a first part that is a section, and this stays an unknown key."""
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  lr.x: 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(FlowGRPOConfig, path)
    assert "unknown config key 'train.lr.x'" in str(info.value)
    assert "written with dots" not in str(info.value)


def test_a_key_under_an_earlier_scalar_override_is_no_section() -> None:
    """`--set train=5 --set train.lr=0.5`: only an earlier override's mapping becomes the section later keys go
    into; a scalar one is still refused as no section (turning any override into a dict failed with
    TypeError's traceback, "'int' object is not iterable")."""
    with pytest.raises(ConfigError, match=r"override 'train\.lr=0\.5': 'train' is not a section"):
        load_config(FlowGRPOConfig, None, ["train=5", "train.lr=0.5"])

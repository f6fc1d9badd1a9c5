"""An unknown key's message did not say where the key was written: a key in the config file and the same key given
with --set read alike, and with a recipe file and several --set items the user was left to find which to edit."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.config import ConfigError, load_config
from imgalign.trainers.config import FlowGRPOConfig


def _message(path: Path | None, overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(FlowGRPOConfig, path, overrides)
    return str(info.value)


def test_an_unknown_key_of_the_config_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text("train:\n  lerning_rate: 1.0e-4\n")
    assert _message(path, []).startswith(
        f"config file {str(path)!r}: unknown config key 'train.lerning_rate'; "
    )
    # an override of another key leaves the file's key the file's
    assert _message(path, ["train.max_steps=2", "train={max_steps: 3}"]).startswith(
        f"config file {str(path)!r}: "
    )
    # a section of the wrong level, with the place it lives
    path.write_text("nft:\n  beta: 1\n")
    assert _message(path, []) == (
        f"config file {str(path)!r}: unknown config key 'nft'; valid keys here: model, prompts, sampling, rewards, "
        "objective, train, eval, log; did you mean objective.nft?"
    )


def test_an_unknown_key_given_with_set_is_not_blamed_on_the_file(tmp_path: Path) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text("train:\n  max_steps: 2\n")
    for overrides in (["train.lerning_rate=1"], ["train={lerning_rate: 1}"], ["nft.beta=1"]):
        assert _message(path, overrides).startswith("unknown config key '"), overrides
    # the file has it too, but the --set given after it set it last: the user has it on the command line
    path.write_text("train:\n  lerning_rate: 1.0e-4\n")
    assert _message(path, ["train.lerning_rate=1"]).startswith("unknown config key 'train.lerning_rate'; ")
    assert _message(None, ["train.lerning_rate=1"]).startswith("unknown config key 'train.lerning_rate'; ")


def test_a_dotted_key_in_a_sets_mapping_is_the_sets_not_the_files(tmp_path: Path) -> None:
    """A --set section mapping whose key holds a dot (train={lr.x: 1}) was not seen to set the file's same key,
    which was then blamed on the file."""
    path = tmp_path / "recipe.yaml"
    path.write_text("train:\n  lr.x: 1\n")
    assert _message(path, []).startswith(f"config file {str(path)!r}: unknown config key 'train.lr.x'")
    assert _message(path, ["train={lr.x: 2}"]).startswith("unknown config key 'train.lr.x'")

"""Bad-input round 30b: a YAML config file written with --set's dotted keys (``train.lr: 1e-3``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.config import ConfigError, load_config
from imgalign.trainers.config import FlowGRPOConfig


@pytest.mark.parametrize(
    ("text", "wanted"),
    [
        ("train.lr: 1.0e-3\n", r"config key 'train\.lr' is written with dots, .*: train:, then lr: "),
        (
            "sampling.tree.branch_steps: [1]\n",
            r"config key 'sampling\.tree\.branch_steps' is written with dots, which only --set reads "
            r"\(sampling\.tree\.branch_steps=VALUE\); .*: sampling:, then tree:, then branch_steps: ",
        ),
        (  # inside a section: the key is named by its full path, the nesting from that section down
            "sampling:\n  tree.branch_steps: [1]\n",
            r"config key 'sampling\.tree\.branch_steps' is written with dots, .*: tree:, then branch_steps: ",
        ),
    ],
)
def test_a_dotted_key_in_a_file_says_to_nest_it(text: str, wanted: str, tmp_path: Path) -> None:
    """It was refused as "unknown config key 'train.lr'", naming as unknown the very key the user meant (and
    the valid keys of the top level, or a "did you mean train?"): now it says that dots are --set's syntax and how
    the file nests the key."""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=wanted):
        load_config(FlowGRPOConfig, path)


def test_a_dotted_key_under_no_section_is_still_an_unknown_key(tmp_path: Path) -> None:
    """A dotted key whose first part is no section (sampling.foo.bar) keeps the unknown-key message with the valid
    keys of its level."""
    path = tmp_path / "c.yaml"
    path.write_text("sampling:\n  foo.bar: 1\n")
    with pytest.raises(
        ConfigError, match=r"unknown config key 'sampling\.foo\.bar'; valid keys here: num_steps, "
    ):
        load_config(FlowGRPOConfig, path)


@pytest.mark.parametrize("word", ["yes", "on", "true"])
def test_a_yes_for_a_choice_says_what_yaml_made_of_it(word: str, tmp_path: Path) -> None:
    """train.mixed_precision (no, bf16, fp16) given an unquoted yes/on/true was refused as "True is not one of 'no',
    'bf16', 'fp16'", a value the user never wrote, and no more. The message now also names the word written
    and how YAML read it, in a file and through --set alike."""
    wanted = (
        rf"train\.mixed_precision: True is not one of .* \(YAML reads an unquoted {word} as true: write one "
    )
    path = tmp_path / "c.yaml"
    path.write_text(f"train:\n  mixed_precision: {word}\n")
    with pytest.raises(ConfigError, match=wanted):
        load_config(FlowGRPOConfig, path)
    with pytest.raises(ConfigError, match=wanted):
        load_config(FlowGRPOConfig, None, [f"train.mixed_precision={word}"])

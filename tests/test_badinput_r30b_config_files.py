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


@pytest.mark.parametrize("word", ["yes", "on", "ON"])
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


def test_a_true_for_a_choice_gets_no_reading_note() -> None:
    """An unquoted true is read as the word written: no "(YAML reads an unquoted true as true)"."""
    with pytest.raises(
        ConfigError, match=r"^train\.mixed_precision: True is not one of 'no', 'bf16', 'fp16'$"
    ):
        load_config(FlowGRPOConfig, None, ["train.mixed_precision=true"])


def test_a_date_that_is_no_date_is_text(tmp_path: Path) -> None:
    """YAML reads an unquoted 2024-13-45 as a timestamp and fails to build it: `--set log.output_dir=2024-13-45`
    (a run folder named by a mistyped date) was refused with "month must be in 1..12", naming no key. A str field
    now takes the text, in a file and through --set, and a number field names its key."""
    path = tmp_path / "c.yaml"
    path.write_text("log:\n  output_dir: 2024-02-30\n")
    assert load_config(FlowGRPOConfig, path).log.output_dir == "2024-02-30"
    assert load_config(FlowGRPOConfig, None, ["log.output_dir=2024-13-45"]).log.output_dir == "2024-13-45"
    with pytest.raises(ConfigError, match=r"^train\.lr: expected a number, got '2024-13-45'"):
        load_config(FlowGRPOConfig, None, ["train.lr=2024-13-45"])
    # an item of a comma list given for a list of numbers
    with pytest.raises(
        ConfigError, match=r"^sampling\.tree\.branch_steps\[1\]: expected an integer, got '2024-13-45'"
    ):
        load_config(FlowGRPOConfig, None, ["sampling.tree.branch_steps=1,2024-13-45"])


def test_an_integer_beyond_pythons_digit_limit_names_its_key(tmp_path: Path) -> None:
    """An integer of over 4300 digits failed in YAML's int() with "Exceeds the limit (4300 digits) for integer
    string conversion ... use sys.set_int_max_str_digits()", naming no key and advising a Python call; now the key
    is named."""
    huge = "1" + "0" * 5000
    path = tmp_path / "c.yaml"
    path.write_text(f"train:\n  max_steps: {huge}\n")
    with pytest.raises(ConfigError, match=r"^train\.max_steps: expected an integer, got '10"):
        load_config(FlowGRPOConfig, path)
    with pytest.raises(ConfigError, match=r"^train\.max_steps: expected an integer, got '10"):
        load_config(FlowGRPOConfig, None, [f"train.max_steps={huge}"])

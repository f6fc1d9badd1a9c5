"""Bad-input round 30b: a --set mapping for a section the config file does not have, followed by another --set of
that section."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.config import load_config
from imgalign.trainers.config import FlowGRPOConfig


@pytest.fixture
def no_train_section(tmp_path: Path) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text("sampling:\n  num_steps: 6\n")
    return path


def test_a_key_after_a_mapping_of_its_section(no_train_section: Path) -> None:
    """`--set 'train={max_steps: 2}' --set train.lr=0.5` with a config file without a train: section was refused
    as "override 'train.lr=0.5': 'train' is not a section" (the first override was kept as text until the end);
    the other order worked. Both keys are set now."""
    cfg = load_config(FlowGRPOConfig, no_train_section, ["train={max_steps: 2}", "train.lr=0.5"])
    assert (cfg.train.max_steps, cfg.train.lr) == (2, 0.5)


def test_a_mapping_after_a_mapping_of_the_same_section(no_train_section: Path) -> None:
    """`--set 'train={max_steps: 2}' --set 'train={lr: 0.5}'` dropped max_steps without a word (the second mapping
    replaced the first); a mapping sets its keys and leaves the section's others, as it does over a file's section."""
    cfg = load_config(FlowGRPOConfig, no_train_section, ["train={max_steps: 2}", "train={lr: 0.5}"])
    assert (cfg.train.max_steps, cfg.train.lr) == (2, 0.5)
    assert cfg.sampling.num_steps == 6


def test_a_str_field_in_a_section_mapping_keeps_its_text(no_train_section: Path) -> None:
    """The section's values keep the text written for str fields (12:30 is a folder name, not 750) after a later
    key of that section merges in."""
    cfg = load_config(FlowGRPOConfig, no_train_section, ["log={output_dir: 12:30}", "log.keep_last=3"])
    assert (cfg.log.output_dir, cfg.log.keep_last) == ("12:30", 3)

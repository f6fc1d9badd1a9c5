"""Mutation round 32k: imgalign/config._key_source and _holds. A config file's unknown key holding a dot
(lr.x) is the file's though an override sets a neighbouring key: another dotted key, the section's lr itself,
or a key below lr, none of which is lr.x."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.config import ConfigError, load_config
from imgalign.trainers.config import FlowGRPOConfig


@pytest.mark.parametrize(
    "override",
    [
        "train={lr.y: 2}",  # another dotted key of the same first part
        "train.lr=0.1",  # lr itself, a number (no mapping to hold lr.x)
        "train.lr={y: 1}",  # a key below lr, not x
        "train={lr: {y: 1}}",  # the same, as the section's mapping
    ],
)
def test_an_override_beside_the_files_dotted_key_leaves_it_the_files(tmp_path: Path, override: str) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text("train:\n  lr.x: 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(FlowGRPOConfig, path, [override])
    assert str(info.value).startswith(f"config file {str(path)!r}: unknown config key 'train.lr.x'; ")


def test_a_key_of_two_sections_given_at_the_top_names_both(tmp_path: Path) -> None:
    """num_steps lives in sampling and eval: the hint names the two joined by 'or' (len(paths) > 1)."""
    path = tmp_path / "recipe.yaml"
    path.write_text("num_steps: 2\n")
    with pytest.raises(ConfigError) as info:
        load_config(FlowGRPOConfig, path, [])
    assert str(info.value).startswith(f"config file {str(path)!r}: unknown config key 'num_steps'; ")
    assert str(info.value).endswith("; did you mean sampling.num_steps or eval.num_steps?")

"""Round 24 (second pass) mutation survivors of imgalign/config.py: tests that pin the behaviour they changed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from imgalign.config import ConfigError, load_config


@dataclasses.dataclass
class _Config:
    name: str = "run"


def _load(tmp_path: Path, text: str) -> _Config:
    (tmp_path / "c.yaml").write_text(text)
    return load_config(_Config, tmp_path / "c.yaml")


def test_a_mapping_for_a_text_field_gets_no_comma_list_hint(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, "name: {a: 1}\n")
    assert str(e.value) == "name: expected a string, got {'a': 1}"
    with pytest.raises(ConfigError, match="write them as one comma list: a,b"):
        _load(tmp_path, "name: [a, b]\n")

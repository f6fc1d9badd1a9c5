"""Round 28c mutants of imgalign/config.py that the suite let through."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from imgalign.config import load_config


@dataclass
class _Inner:
    lr: float = 0.1
    steps: int = 1


@dataclass
class _Outer:
    inner: _Inner = dataclasses.field(default_factory=_Inner)
    name: str = "x"


@dataclass
class _Cfg:
    outer: _Outer = dataclasses.field(default_factory=_Outer)


def test_a_set_mapping_fills_a_nested_section_the_file_left_empty(tmp_path: Path) -> None:
    """A file's section whose keys are all commented out reads as null; --set outer={inner: {lr: 0.5}} sets that
    section's key (its others keep their defaults) and the file's other keys of outer stay as written."""
    p = tmp_path / "c.yaml"
    p.write_text("outer:\n  inner:\n  name: y\n")
    cfg = load_config(_Cfg, p, ["outer={inner: {lr: 0.5}}"])
    assert cfg.outer == _Outer(inner=_Inner(lr=0.5, steps=1), name="y")

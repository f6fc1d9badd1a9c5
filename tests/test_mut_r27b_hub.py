"""Mutation round 27 (hub.py): behaviour the earlier tests let a mutant change unseen."""

from __future__ import annotations

import json
from pathlib import Path

from imgalign.hub import _not_transformers_folder, names_env_var


def test_a_dollar_and_a_digit_is_no_environment_variable() -> None:
    """A shell variable name starts with a letter or _: `runs/$1x` (a literal name) gets no "not expanded" hint."""
    assert not names_env_var("runs/$1x")
    assert names_env_var("runs/$_x") and names_env_var("runs/${X1}")


def test_a_config_with_a_model_type_is_not_called_a_diffusers_part(tmp_path: Path) -> None:
    """A config.json that has a model_type is a transformers config even with a _class_name: nothing to add."""
    (tmp_path / "config.json").write_text(json.dumps({"_class_name": "X", "model_type": "llama"}))
    assert _not_transformers_folder(tmp_path) == ""
    (tmp_path / "config.json").write_text(json.dumps({"_class_name": "X"}))
    assert "diffusers X" in _not_transformers_folder(tmp_path)

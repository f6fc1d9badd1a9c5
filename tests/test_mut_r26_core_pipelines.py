"""Mutation round 26 (helper C): behaviour of imgalign.pipelines that no test pinned."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.pipelines import IncompleteModelError, check_pipeline_folder
from imgalign.trainers.testing import stub_pipeline_folder


def test_a_model_component_without_its_config_is_named_missing(tmp_path: Path) -> None:
    """A component whose name holds "model" (e.g. AudioLDM2's ``language_model``) is a model folder like a text
    encoder: one without its config.json is named missing before anything loads. Checked only for "encoder",
    "transformer" and "vae" names, such a folder passed the check and failed later inside diffusers' loader."""
    folder = stub_pipeline_folder(
        tmp_path / "pipe",
        {"transformer": ["config.json", "w.safetensors"], "language_model": ["w.safetensors"]},
    )
    with pytest.raises(IncompleteModelError) as e:
        check_pipeline_folder(folder)
    assert "is incomplete; missing: language_model/config.json;" in str(e.value)

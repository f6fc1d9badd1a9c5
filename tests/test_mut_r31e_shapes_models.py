"""Mutation round 31 (helper e): imgalign/shapes_models.py names every file an embedded-model folder lacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.hub import ModelNotFoundError
from imgalign.shapes_models import load_shapes_vlm


def test_an_empty_vlm_folder_names_every_missing_file(tmp_path: Path) -> None:
    with pytest.raises(
        ModelNotFoundError, match=r"missing config\.json, model\.safetensors, tokenizer\.json\)"
    ):
        load_shapes_vlm(folder=tmp_path)

"""Mutation round 25 (commands/grid.py): behaviour the earlier tests let a mutant change unseen."""

from __future__ import annotations

import json
from pathlib import Path

from imgalign.commands.grid import check_size_before_loading
from imgalign.pipelines import ModelSpec


def test_a_size_is_left_to_the_loaded_pipeline_when_the_configs_cannot_tell(tmp_path: Path) -> None:
    """A pipeline folder of another class (or one whose configs do not say its sizes) is not checked up front: the
    size is checked once it has loaded; it is not a TypeError from unpacking no sizes."""
    base = tmp_path / "pixart"
    (base / "transformer").mkdir(parents=True)
    (base / "vae").mkdir()
    (base / "model_index.json").write_text(json.dumps({"_class_name": "PixArtAlphaPipeline"}))
    (base / "transformer" / "config.json").write_text(json.dumps({"sample_size": 128}))
    (base / "vae" / "config.json").write_text(json.dumps({"block_out_channels": [128, 256, 512, 512]}))
    check_size_before_loading(ModelSpec("pixart", str(base)), 77)
    (base / "model_index.json").unlink()  # no model_index.json at all: nothing to read the sizes from
    check_size_before_loading(ModelSpec("pixart", str(base)), 77)

"""Mutation round 25 (commands/grid.py): behaviour the earlier tests let a mutant change unseen."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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


def test_grid_loads_each_model_on_the_given_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--device reaches the pipeline loader (it sampled on the CPU whatever --device said); the device check is
    stood in for, this machine may have no GPU."""
    from PIL import Image

    import imgalign.commands as commands
    import imgalign.eval.gallery as gallery
    import imgalign.pipelines as P
    import imgalign.sampling as S
    from imgalign.cli import main

    devices = []
    monkeypatch.setattr(commands, "check_device", lambda device, flag="--device": None)
    monkeypatch.setattr(P, "load_pipeline", lambda spec, device, dtype: devices.append(device) or spec.label)
    monkeypatch.setattr(
        S, "generate_images", lambda pipe, prompts, seeds, batch_size, **kw: [pipe] * len(seeds)
    )
    monkeypatch.setattr(gallery, "labelled_grid", lambda *a, **kw: Image.new("RGB", (4, 4)))
    argv = ["grid", "--model", "a=shapes", "--model", "b=shapes", "--prompt", "x", "--device", "cuda:1"]
    assert main([*argv, "--out", str(tmp_path / "g.png")]) == 0
    assert devices == ["cuda:1", "cuda:1"]

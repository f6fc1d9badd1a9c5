"""Mutation round 26c: preflight's model.resolution check read from a pipeline folder's configs
(:func:`imgalign.trainers.trainer.resolution_error`)."""

from __future__ import annotations

import json
from pathlib import Path

from imgalign.trainers.trainer import resolution_error


def _folder(tmp_path: Path, pipeline: str, transformer: dict[str, object]) -> Path:
    """Only the JSON configs of a pipeline folder: a VAE of 3 blocks (factor 4) and `transformer`'s config."""
    folder = tmp_path / "model"
    (folder / "transformer").mkdir(parents=True)
    (folder / "vae").mkdir()
    (folder / "model_index.json").write_text(json.dumps({"_class_name": pipeline}))
    (folder / "transformer" / "config.json").write_text(json.dumps(transformer))
    (folder / "vae" / "config.json").write_text(json.dumps({"block_out_channels": [1, 1, 1]}))
    return folder


def test_an_sd3_without_a_positional_grid_has_no_upper_bound(tmp_path: Path) -> None:
    """pos_embed_max_size: null means no bound (step 4 x 2 = 8): 4096 is a multiple of 8 and passes, as the
    adapter takes it; a bound of 0 x 8 refused every size as larger than the model can take."""
    cfg = {"patch_size": 2, "sample_size": 8, "pos_embed_max_size": None}
    folder = _folder(tmp_path, "StableDiffusion3Pipeline", cfg)
    assert resolution_error(folder, 4096, "m") is None
    assert "use a multiple of 8" in resolution_error(folder, 4100, "m")


def test_a_pipeline_the_configs_cannot_tell_is_left_to_the_adapter(tmp_path: Path) -> None:
    """Another pipeline class gives no sizes from its configs: the check passes it (the size is checked once the
    model loads) rather than refusing a size it knows nothing about."""
    folder = _folder(tmp_path, "KandinskyPipeline", {"patch_size": 2})
    assert resolution_error(folder, 37, "m") is None


def test_an_sd3_side_at_its_grid_passes_and_one_step_past_it_is_refused(tmp_path: Path) -> None:
    """A grid of 16 patches of 8 pixels: 128 is the largest side (passes), 136 is refused naming 128."""
    cfg = {"patch_size": 2, "sample_size": 8, "pos_embed_max_size": 16}
    folder = _folder(tmp_path, "StableDiffusion3Pipeline", cfg)
    assert resolution_error(folder, 128, "m") is None
    assert "at most 128 (its positional-embedding grid of 16 patches of 8 pixels)" in resolution_error(
        folder, 136, "m"
    )

"""imgalign.sampling without a model: the sizes read from a pipeline folder's configs, the settings
generate_images hands the pipeline, and the seeds of the GenEval layout (a stub pipeline records its calls)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

from imgalign.hub import embedded_path
from imgalign.sampling import folder_sizes


def _sd3_folder(tmp_path: Path, drop: tuple[str, ...]) -> Path:
    """A copy of the shapes model's configs (VAE factor 4) whose transformer config lacks the keys `drop`."""
    base = embedded_path("shapes")
    (tmp_path / "transformer").mkdir()
    (tmp_path / "vae").mkdir()
    (tmp_path / "model_index.json").write_text((base / "model_index.json").read_text())
    (tmp_path / "vae" / "config.json").write_text((base / "vae" / "config.json").read_text())
    config = json.loads((base / "transformer" / "config.json").read_text())
    (tmp_path / "transformer" / "config.json").write_text(
        json.dumps({k: v for k, v in config.items() if k not in drop})
    )
    return tmp_path


def test_folder_sizes_of_an_sd3_config_without_size_keys_are_diffusers_defaults(tmp_path):
    """A transformer config.json that leaves out patch_size, sample_size and pos_embed_max_size loads with
    SD3Transformer2DModel's defaults (2, 128, 96): sides are multiples of 4 x 2 up to a grid of 96 patches, trained at
    128 x 4 (not the 128-patch grid sample_size alone would give)."""
    from diffusers import SD3Transformer2DModel

    defaults = {k: p.default for k, p in inspect.signature(SD3Transformer2DModel.__init__).parameters.items()}
    assert (defaults["patch_size"], defaults["sample_size"], defaults["pos_embed_max_size"]) == (2, 128, 96)
    folder = _sd3_folder(tmp_path, ("patch_size", "sample_size", "pos_embed_max_size"))
    assert folder_sizes(folder) == ([8 * k for k in range(1, 97)], 512)

"""Round 24 (second pass) mutation survivors of imgalign/sampling.py: tests that pin the behaviour they changed."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from imgalign.sampling import folder_sizes, unknown_token_words


def _folder(tmp_path: Path, pipeline: str, transformer: dict[str, object], blocks: int) -> Path:
    """The JSON configs folder_sizes reads: a VAE with `blocks` blocks (factor 2 ** (blocks - 1))."""
    (tmp_path / "transformer").mkdir()
    (tmp_path / "vae").mkdir()
    (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": pipeline}))
    (tmp_path / "transformer" / "config.json").write_text(json.dumps(transformer))
    (tmp_path / "vae" / "config.json").write_text(json.dumps({"block_out_channels": [4] * blocks}))
    return tmp_path


def test_sd3_sizes_step_by_vae_factor_times_the_configs_patch_size(tmp_path: Path) -> None:
    config = {"patch_size": 1, "sample_size": 8, "pos_embed_max_size": 6}
    folder = _folder(tmp_path, "StableDiffusion3Pipeline", config, blocks=3)
    assert folder_sizes(folder) == ([4, 8, 12, 16, 20, 24], 32)


def test_flux_sizes_go_up_to_four_times_its_default_size_in_pixels(tmp_path: Path) -> None:
    sizes, trained = folder_sizes(_folder(tmp_path, "FluxPipeline", {}, blocks=4))
    assert (sizes[0], sizes[-1], trained) == (16, 4 * 1024, 1024)


def test_a_tokenizer_that_cannot_be_called_finds_no_unknown_token_words() -> None:
    assert unknown_token_words(SimpleNamespace(unk_token_id=0), ["a&b"]) == []

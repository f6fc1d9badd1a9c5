"""Round 24 (second pass) mutation survivors of imgalign/sampling.py: tests that pin the behaviour they changed."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from imgalign.sampling import folder_sizes, generate, unknown_token_words


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


class _Pipe:
    """An SD3-like pipeline stand-in (64-pixel images) whose tokenizer knows only 'a' and 'cat'."""

    patch_size, vae_scale_factor, default_sample_size = 1, 8, 8
    transformer = SimpleNamespace(config=SimpleNamespace(pos_embed_max_size=8, sample_size=8))
    tokenizer = SimpleNamespace(get_vocab=lambda: {"a</w>": 0, "cat</w>": 1})

    def __call__(self, prompt: list[str], **kwargs: object) -> SimpleNamespace:
        return SimpleNamespace(images=list(prompt))


def test_generate_warns_about_words_outside_the_vocabulary(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="imgalign.sampling"):
        assert generate(_Pipe(), ["a dog"], [0]) == ["a dog"]
    assert (
        "words outside the model's vocabulary (tokenised as pieces the model never learned): dog"
        in caplog.text
    )


def test_punctuation_standing_alone_is_no_unknown_word(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="imgalign.sampling"):
        generate(_Pipe(), ["a ! cat"], [0])
    assert caplog.text == ""

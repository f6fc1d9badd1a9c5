"""Round 28 (helper d) mutation survivors of imgalign/sampling.py: tests that pin the behaviour they changed."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from PIL import Image

import imgalign.sampling as sampling
from imgalign.pipelines import LENGTH_WARNING
from imgalign.sampling import (
    generate_folder,
    generate_images,
    image_seed,
    long_prompts_said,
    long_rows_warning,
    supported_sizes,
    warn_unknown_words,
)
from tests.conftest import CLIPTextModel, WordTokenizer


class _ClipPipe:
    """Not callable (no call signature to read); one CLIP of 77 tokens."""

    tokenizer_max_length = 77

    def __init__(self) -> None:
        self.tokenizer, self.text_encoder = WordTokenizer(), CLIPTextModel()


class _SizedPipe:
    """An SD3-like pipeline (sides 8 to 64 pixels) that records the prompts of each call."""

    patch_size, vae_scale_factor, default_sample_size = 1, 8, 8
    transformer = SimpleNamespace(config=SimpleNamespace(pos_embed_max_size=8, sample_size=8))

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, prompt: list[str], **kwargs: Any) -> SimpleNamespace:
        self.calls.append(list(prompt))
        return SimpleNamespace(images=list(prompt))


def _sample(pipe: Any, prompts: list[str], seeds: list[int], batch_size: int, **settings: Any) -> list:
    return [Image.new("RGB", (8, 8)) for _ in prompts]


def test_flux_pipeline_sizes_go_up_to_four_times_its_default_size() -> None:
    flux = SimpleNamespace(vae_scale_factor=8, default_sample_size=128)  # no patch_size: FLUX
    sizes = supported_sizes(flux)
    assert (sizes[0], sizes[1], sizes[-1]) == (16, 32, 4 * 1024)


def test_a_capitalised_word_of_the_vocabulary_is_no_unknown_word(caplog: pytest.LogCaptureFixture) -> None:
    pipe = SimpleNamespace(tokenizer=SimpleNamespace(get_vocab=lambda: {"red</w>": 0, "cat</w>": 1}))
    with caplog.at_level(logging.WARNING, logger="imgalign.sampling"):
        warn_unknown_words(pipe, ["Red Cat."])
    assert caplog.text == ""


def test_generate_images_refuses_a_size_the_transformer_cannot_take_before_sampling() -> None:
    pipe = _SizedPipe()
    with pytest.raises(ValueError, match=r"height=12 is not an image size this model can take"):
        generate_images(pipe, ["a"], [0], size=12)
    assert pipe.calls == []


def test_generate_images_with_batch_size_one_calls_the_pipeline_once_per_prompt() -> None:
    pipe = _SizedPipe()
    assert generate_images(pipe, ["a", "b", "c"], [1, 2, 3], batch_size=1) == ["a", "b", "c"]
    assert pipe.calls == [["a"], ["b"], ["c"]]


def test_image_seeds_are_31_bit_and_fixed_by_the_formula() -> None:
    # 2200 * 1_000_003 has bit 31 set: masked off, as every GenEval folder written so far was seeded
    assert image_seed(2200, 3, 2) == (2200 * 1_000_003 + 3 * 1009 + 2) - 2**31
    assert all(0 <= image_seed(s, 7, 1) < 2**31 for s in range(0, 10_000, 7))


def test_two_truncated_rows_are_named_in_the_plural() -> None:
    over = {"p1": ("CLIP", 80), "p2": ("CLIP", 90)}
    line = long_rows_warning("m", ["p1", "p2"], over, "CLIP 77")
    assert "the prompts of rows 1, 2 (row 1: 80 CLIP tokens) are longer" in line


def test_the_tokenizers_length_warning_mark_is_put_back_after_the_block() -> None:
    pipe = _ClipPipe()
    with long_prompts_said(pipe, "m", ["w " * 80], None):
        assert pipe.tokenizer.deprecation_warnings[LENGTH_WARNING] is True
    assert LENGTH_WARNING not in pipe.tokenizer.deprecation_warnings


def test_an_image_over_the_pixel_limit_is_sampled_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    samples = tmp_path / "00000" / "samples"
    samples.mkdir(parents=True)
    Image.new("RGB", (64, 64)).save(samples / "0000.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)  # 64x64 is over twice this: DecompressionBombError
    drawn: list[list[str]] = []

    def sample(pipe: Any, prompts: list[str], seeds: list[int], batch_size: int, **settings: Any) -> list:
        drawn.append(prompts)
        return _sample(pipe, prompts, seeds, batch_size)

    generate_folder(_ClipPipe(), [{"prompt": "a w"}], tmp_path, 1, 0, progress=False, sample=sample)
    assert drawn == [["a w"]]
    assert Image.open(samples / "0000.png").size == (8, 8)


def test_a_resumed_folder_names_only_the_unfinished_truncated_prompts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    metas = [{"prompt": "w " * 80}, {"prompt": "w " * 81}]
    generate_folder(_ClipPipe(), metas[:1], tmp_path, 1, 0, progress=False, sample=_sample)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="imgalign.sampling"):
        generate_folder(_ClipPipe(), metas, tmp_path, 1, 0, progress=False, sample=_sample)
    (line,) = [r.getMessage() for r in caplog.records if "longer than" in r.getMessage()]
    assert "the prompt of prompt folder 00001 (83 CLIP tokens) is" in line


def test_a_model_given_by_name_is_named_in_the_unread_guidance_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    schnell = SimpleNamespace(transformer=SimpleNamespace(config=SimpleNamespace(guidance_embeds=False)))
    monkeypatch.setattr(sampling, "load_pipeline", lambda model, device: schnell)
    with caplog.at_level(logging.WARNING, logger="imgalign.sampling"):
        generate_folder("my/schnell", [], tmp_path, 1, 0, progress=False, sample=_sample, guidance_scale=3.5)
    assert "my/schnell has no guidance embedding" in caplog.text

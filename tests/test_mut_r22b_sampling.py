"""imgalign.sampling, mutation round 22 second pass (no model loads): generate_folder samples with the shapes
model's evaluation settings when no sampler is given, and the truncation notice reads the pipeline call's own
max_sequence_length default."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from imgalign import sampling
from imgalign.sampling import generate_folder, long_prompts_said
from tests.conftest import T5EncoderModel, WordTokenizer

METAS = [{"tag": "single_object", "include": [{"class": "cat", "count": 1}], "prompt": "a photo of a cat"}]


class _Output:
    def __init__(self, images: list[Image.Image]) -> None:
        self.images = images


class _FluxLikePipe:
    """What generate_folder, generate and generate_images read of a FLUX pipeline; records every call's settings."""

    vae_scale_factor = 8
    default_sample_size = 8  # FLUX-like: sides 16 to 256 in steps of 16
    transformer = None

    def __init__(self, **parts: Any) -> None:
        self.__dict__.update(parts)
        self.calls: list[dict[str, Any]] = []

    def __call__(
        self, prompt: list[str], generator: list[Any], max_sequence_length: int = 512, **kw: Any
    ) -> Any:
        self.calls.append({"max_sequence_length": max_sequence_length, **kw})
        return _Output([Image.new("RGB", (4, 4)) for _ in prompt])


def test_generate_folder_samples_with_the_shapes_settings_when_no_sampler_is_given(tmp_path: Path) -> None:
    """The default sampler is generate: the shapes model's steps, guidance, size and context, not the
    pipeline's own defaults (generate_images)."""
    pipe = _FluxLikePipe(tokenizer=WordTokenizer(tuple("a photo of cat".split())))
    generate_folder(pipe, METAS, tmp_path, 2, 0, progress=False)
    (call,) = pipe.calls
    assert call["num_inference_steps"] == sampling.NUM_INFERENCE_STEPS
    assert call["guidance_scale"] == sampling.GUIDANCE_SCALE
    assert call["height"] == call["width"] == sampling.IMAGE_SIZE
    assert call["max_sequence_length"] == sampling.MAX_SEQUENCE_LENGTH
    assert sorted(p.name for p in (tmp_path / "00000" / "samples").iterdir()) == ["0000.png", "0001.png"]


def test_the_truncation_notice_reads_the_pipeline_calls_own_int_default(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A call whose max_sequence_length defaults to 512 (FLUX's) keeps a 302-token prompt whole: no notice;
    past 512 tokens the prompt is named with that limit."""
    pipe = _FluxLikePipe(
        tokenizer_2=WordTokenizer(tuple("a photo of cat".split())), text_encoder_2=T5EncoderModel()
    )

    def said(prompt: str) -> list[str]:
        caplog.clear()
        with (
            caplog.at_level(logging.WARNING, logger="imgalign.sampling"),
            long_prompts_said(pipe, "m", [prompt], None),
        ):
            pass
        return [r.getMessage() for r in caplog.records if r.name == "imgalign.sampling"]

    assert said("w " * 300) == []
    (line,) = said("w " * 511)
    assert "(513 T5 tokens)" in line and "(T5 512 tokens)" in line

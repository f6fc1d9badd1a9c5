"""Round 24 mutation survivors of imgalign/sampling.py: tests that pin the behaviour the surviving mutants changed."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from PIL import Image

from imgalign.sampling import generate_images, warn_unknown_words
from tests.conftest import T5EncoderModel, WordTokenizer


class _Tokenizer:
    """A tokenizer with a whole-word vocabulary whose unknown token is not its end-of-text token."""

    unk_token, unk_token_id, eos_token_id = "<unk>", 0, 1

    def get_vocab(self) -> dict[str, int]:
        return {"<unk>": 0, "<eos>": 1, "a</w>": 2, "red</w>": 3, "circle</w>": 4}

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        ids = [self.unk_token_id if ch == "&" else 5 for ch in text]
        return {"input_ids": ids + ([self.eos_token_id] if add_special_tokens else [])}


def test_an_unknown_token_that_is_not_end_of_text_is_not_said_to_end_the_prompt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The "(its end-of-text token: ...ignores every word after it)" clause is for a tokenizer whose unknown token
    is its end-of-text token (the shapes model's); another tokenizer's unknown token is named without it."""
    with caplog.at_level(logging.WARNING, logger="imgalign.sampling"):
        warn_unknown_words(SimpleNamespace(tokenizer=_Tokenizer()), ["a red circle & a"])
    (lost,) = caplog.messages
    assert lost == (
        "words with characters outside the model's tokenizer, read as its unknown token <unk>: &; leave those "
        "characters out (e.g. write 'and' for '&')"
    )


def test_generate_images_with_a_size_asks_for_square_images() -> None:
    """``size`` is the image side: the pipeline gets it as both height and width."""
    calls: list[dict[str, Any]] = []

    def pipe(prompt: list[str], generator: list[Any], **kwargs: Any) -> SimpleNamespace:
        calls.append(kwargs)
        return SimpleNamespace(images=[None] * len(prompt))

    assert generate_images(pipe, ["a", "b"], [1, 2], size=48) == [None, None]
    assert [(c["height"], c["width"]) for c in calls] == [(48, 48)]


def test_generate_images_gives_each_batch_one_generator_per_prompt_seeded_with_its_seed() -> None:
    """Batches of `batch_size` prompts: each call gets its own prompts' seeds, one CPU generator per prompt (a
    pipeline refuses a generator list of another length)."""
    calls: list[tuple[list[str], list[int]]] = []

    def pipe(prompt: list[str], generator: list[Any], **kwargs: Any) -> SimpleNamespace:
        calls.append((prompt, [g.initial_seed() for g in generator]))
        return SimpleNamespace(images=list(prompt))

    assert generate_images(pipe, ["a", "b", "c"], [5, 6, 7], batch_size=2) == ["a", "b", "c"]
    assert calls == [(["a", "b"], [5, 6]), (["c"], [7])]


class _FluxLikePipe:
    """A pipeline stand-in with FLUX's size attributes (sides: multiples of 16 up to 256) that records its calls."""

    vae_scale_factor, default_sample_size = 8, 8

    def __init__(self) -> None:
        self.tokenizer = _Tokenizer()
        self.calls: list[dict[str, Any]] = []

    def __call__(self, prompt: list[str], generator: list[Any], **kwargs: Any) -> SimpleNamespace:
        self.calls.append(kwargs)
        return SimpleNamespace(images=list(prompt))


def test_generate_passes_a_non_square_height_and_width_as_given() -> None:
    from imgalign.sampling import generate

    pipe = _FluxLikePipe()
    assert generate(pipe, ["a red circle"], [0], height=64, width=128) == ["a red circle"]
    (call,) = pipe.calls
    assert (call["height"], call["width"]) == (64, 128)


def test_generate_refuses_a_width_the_model_cannot_take_before_sampling() -> None:
    from imgalign.sampling import generate

    pipe = _FluxLikePipe()
    with pytest.raises(
        ValueError, match=r"^width=72 is not an image size this model can take; use a multiple of 16"
    ):
        generate(pipe, ["a red circle"], [0], height=64, width=72)
    assert pipe.calls == []


class _T5Pipe:
    """A pipeline stand-in with a T5 encoder whose call defaults to 512 T5 tokens (FLUX's)."""

    transformer = None

    def __init__(self) -> None:
        self.tokenizer_2, self.text_encoder_2 = WordTokenizer(), T5EncoderModel()

    def __call__(self, prompt: list[str], max_sequence_length: int = 512, **kwargs: Any) -> None:
        pass


def test_generate_folder_names_prompts_longer_than_the_max_sequence_length_it_samples_with(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A 12-token prompt sampled with max_sequence_length=8 loses words: it is named with that limit, not the
    pipeline call's own default (512), which it fits."""
    from imgalign.sampling import generate_folder

    def sample(pipe: Any, prompts: list[str], seeds: list[int], **settings: Any) -> list[Image.Image]:
        assert settings["max_sequence_length"] == 8
        return [Image.new("RGB", (16, 16)) for _ in prompts]

    metas = [{"tag": "single_object", "include": [{"class": "w", "count": 1}], "prompt": "w " * 10}]
    with caplog.at_level(logging.WARNING, logger="imgalign.sampling"):
        generate_folder(
            _T5Pipe(), metas, tmp_path, 1, 0, progress=False, sample=sample, max_sequence_length=8
        )
    (line,) = [r.getMessage() for r in caplog.records if r.name == "imgalign.sampling"]
    assert "prompt folder 00000 (12 T5 tokens)" in line and "(T5 8 tokens)" in line


def test_only_the_truncation_notice_is_quiet_while_long_prompts_sample(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Inside the block the pipeline module's truncation notice is dropped; its other records pass, and after the
    block the notice passes again."""
    from imgalign.pipelines import TRUNCATION_NOTICE
    from imgalign.sampling import long_prompts_said

    pipe = _T5Pipe()
    pipeline_log = logging.getLogger(type(pipe).__module__)
    with caplog.at_level(logging.WARNING), long_prompts_said(pipe, "m", ["w " * 600], None):
        pipeline_log.warning("%s because ...", TRUNCATION_NOTICE)
        pipeline_log.warning("another notice")
    assert [r.getMessage() for r in caplog.records if r.name == pipeline_log.name] == ["another notice"]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        pipeline_log.warning("%s after the block", TRUNCATION_NOTICE)
    assert [r.getMessage() for r in caplog.records] == [f"{TRUNCATION_NOTICE} after the block"]

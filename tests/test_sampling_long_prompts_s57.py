"""Round 19's two test gaps in imgalign.sampling.long_prompts_said (stop 57): the 256-token T5 limit of a pipeline
whose call names no max_sequence_length default, and one "CLIP 77" for two CLIPs of different vocabularies."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from imgalign.sampling import long_prompts_said
from tests.conftest import CLIPTextModel, T5EncoderModel, WordTokenizer


class _NoDefaultPipe:
    """A pipeline whose call names max_sequence_length without an int default (a plug-in's, say)."""

    tokenizer_max_length = 77

    def __init__(self, **parts: Any) -> None:
        self.__dict__.update(parts)

    def __call__(self, prompt: str, max_sequence_length: int | None = None) -> None:
        pass


def said(pipe: Any, prompts: list[str], caplog: pytest.LogCaptureFixture) -> list[str]:
    caplog.clear()
    with (
        caplog.at_level(logging.WARNING, logger="imgalign.sampling"),
        long_prompts_said(pipe, "m", prompts, None),
    ):
        pass
    return [r.getMessage() for r in caplog.records if r.name == "imgalign.sampling"]


def test_a_call_without_an_int_default_is_read_as_256_t5_tokens(caplog: pytest.LogCaptureFixture) -> None:
    pipe = _NoDefaultPipe(tokenizer_3=WordTokenizer(("t5",)), text_encoder_3=T5EncoderModel())
    assert said(pipe, ["w " * 254], caplog) == []  # 256 tokens with start and end: kept whole
    (line,) = said(pipe, ["w " * 255], caplog)
    assert "(257 T5 tokens)" in line and "(T5 256 tokens)" in line


def test_two_clips_of_the_same_limit_are_named_once(caplog: pytest.LogCaptureFixture) -> None:
    pipe = _NoDefaultPipe(
        tokenizer=WordTokenizer(("clip-l",)),
        text_encoder=CLIPTextModel(),
        tokenizer_2=WordTokenizer(("clip-g",)),
        text_encoder_2=CLIPTextModel(),
        tokenizer_3=WordTokenizer(("t5",)),
        text_encoder_3=T5EncoderModel(),
    )
    (line,) = said(pipe, ["w " * 80], caplog)
    assert "(CLIP 77, T5 256 tokens)" in line

"""imgalign.sampling, mutation round 22: the prompt words the shapes model's tokenizer cannot read."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from transformers import CLIPTokenizer

from imgalign.hub import embedded_path
from imgalign.sampling import generate_images, warn_unknown_words


def test_a_character_the_shapes_tokenizer_reads_as_end_of_text_is_named_as_such(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """'&' or 'é' is no piece the shapes tokenizer knows: it becomes its unknown token, <|endoftext|>, and the CLIP
    encoders' pooled embedding of 'a red circle & a blue square' is that of 'a red circle'. The warning said such
    words were 'tokenised as pieces'; now it names them apart, with the token they become."""
    tok = CLIPTokenizer.from_pretrained(embedded_path("shapes") / "tokenizer")
    assert tok.unk_token_id in tok("a red circle & a blue square", add_special_tokens=False)["input_ids"]
    with caplog.at_level(logging.WARNING, logger="imgalign.sampling"):
        warn_unknown_words(
            SimpleNamespace(tokenizer=tok), ["a red circle & a blue square", "a zebra", "a crème"]
        )
    pieces, lost = caplog.messages
    assert pieces.endswith("never learned): zebra")
    assert lost.startswith("words with characters outside the model's tokenizer, read as its unknown token ")
    assert (
        "<|endoftext|> (its end-of-text token: the text encoders' pooled embedding ignores every word" in lost
    )
    assert lost.split("after it): ")[1].startswith("&, crème; leave those characters out")


def test_a_prompt_of_known_pieces_only_gives_no_unknown_token_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tok = CLIPTokenizer.from_pretrained(embedded_path("shapes") / "tokenizer")
    with caplog.at_level(logging.WARNING, logger="imgalign.sampling"):
        warn_unknown_words(SimpleNamespace(tokenizer=tok), ["a photo of a red circle.", "two zebras"])
    assert caplog.messages == [
        "words outside the model's vocabulary (tokenised as pieces the model never learned): zebras"
    ]


def test_generate_images_passes_the_callers_output_type_and_other_settings_as_they_are() -> None:
    """'pil' is only the default: a caller asking for latents or arrays gets them, with every other setting."""
    calls: list[dict[str, Any]] = []

    def pipe(prompt: list[str], generator: list[Any], **kw: Any) -> SimpleNamespace:
        calls.append(kw)
        return SimpleNamespace(images=list(prompt))

    assert generate_images(pipe, ["a", "b"], [1, 2], output_type="latent", negative_prompt="x") == ["a", "b"]
    assert calls == [{"output_type": "latent", "negative_prompt": "x"}]


def test_more_than_ten_truncated_rows_name_the_first_ten_and_count_the_rest() -> None:
    from imgalign.sampling import long_rows_warning

    prompts = [f"prompt {n}" for n in range(12)]
    line = long_rows_warning("m", prompts, {p: ("CLIP", 80) for p in prompts}, "CLIP 77")
    assert "rows 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 2 more (row 1: 80 CLIP tokens) are longer" in line

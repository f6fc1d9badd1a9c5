"""Prompt words are split as CLIP's tokenizer splits them before BPE (stop 66; carried from round 26)."""

from __future__ import annotations

import logging

from imgalign.pretrain.tokenizer import prompt_pieces, unknown_words
from imgalign.sampling import warn_unknown_words
from imgalign.shapes_models import embedded_path


def test_pieces_follow_clips_pre_tokenizer():
    assert prompt_pieces("A Red-Circle, to the left of a circle's edge 12") == [
        "a", "red", "-", "circle", ",", "to", "the", "left", "of", "a", "circle", "'s", "edge", "1", "2",
    ]  # fmt: skip


def test_a_hyphenated_prompt_is_made_of_known_words():
    assert unknown_words("a red-circle") == []  # was ["red-circle"]: the tokenizer sees "red", "-", "circle"
    assert unknown_words("a red-zebra") == ["zebra"]
    assert unknown_words("a circle's edge") == ["'s", "edge"]


def test_the_shapes_model_warns_only_about_what_its_tokenizer_cannot_read_whole(caplog):
    from transformers import CLIPTokenizer

    tok = CLIPTokenizer.from_pretrained(embedded_path("shapes") / "tokenizer")
    assert tok.tokenize("red-circle") == ["red</w>", "-</w>", "circle</w>"]  # three whole, known words

    class Pipe:
        tokenizer = tok

    with caplog.at_level(logging.WARNING, logger="imgalign.sampling"):
        warn_unknown_words(Pipe(), ["a red-circle", "two blue-squares..."])
    assert caplog.text == ""
    with caplog.at_level(logging.WARNING, logger="imgalign.sampling"):
        warn_unknown_words(Pipe(), ["a red-zebra & a circle"])
    lines = caplog.text.splitlines()
    assert lines[0].endswith("never learned): zebra")
    assert "&" in lines[1] and "red" not in lines[1]

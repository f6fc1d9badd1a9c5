"""prompt_pieces splits as the CLIP tokenizer's own pre-tokenizer splits (round 29j: runs of punctuation and
underscores, '-_', were two pieces where CLIP's '[^\\s\\p{L}\\p{N}]+' reads one; mutants on the punctuation runs
survived)."""

from __future__ import annotations

import pytest

from imgalign.pretrain.tokenizer import prompt_pieces
from imgalign.shapes_models import embedded_path


@pytest.mark.parametrize(
    "prompt",
    ["two blue-squares...", "a_b", "x -_ y", "x_-y", "a__b", "circle's 12 ok!?", "It's a RED-circle;-)"],
)
def test_pieces_are_the_clip_pre_tokenizers(prompt):
    from transformers import CLIPTokenizer

    tok = CLIPTokenizer.from_pretrained(embedded_path("shapes") / "tokenizer").backend_tokenizer
    real = [piece for piece, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(prompt))]
    assert prompt_pieces(prompt) == real


def test_a_digit_is_a_word_the_shapes_vocabulary_lacks():
    """The shapes vocabulary spells numbers out: a digit is a word outside it, not punctuation to ignore (round 29j
    mutant: is_word by letters alone survived)."""
    from imgalign.pretrain.tokenizer import unknown_words

    assert unknown_words("3 circles") == ["3"]
    assert unknown_words("a circle, 12!") == ["1", "2"]

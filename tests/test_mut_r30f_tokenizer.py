"""prompt_pieces keeps CLIP's contractions as pieces of their own (round 30f: dropping any one of them from the
pattern survived, since the tests' prompts held only "'s")."""

from __future__ import annotations

from imgalign.pretrain.tokenizer import prompt_pieces
from imgalign.shapes_models import embedded_path


def test_every_contraction_is_one_piece_as_clips_pre_tokenizer_reads_it():
    from transformers import CLIPTokenizer

    prompt = "We're sure they've i'm you'll it'd DON'T, it's"
    pieces = [
        "we",
        "'re",
        "sure",
        "they",
        "'ve",
        "i",
        "'m",
        "you",
        "'ll",
        "it",
        "'d",
        "don",
        "'t",
        ",",
        "it",
        "'s",
    ]
    assert prompt_pieces(prompt) == pieces
    tok = CLIPTokenizer.from_pretrained(embedded_path("shapes") / "tokenizer").backend_tokenizer
    assert [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(prompt))] == pieces


def test_a_decomposed_accent_is_one_word_as_the_tokenizers_nfc_normalizer_reads_it():
    """'cafe' + U+0301 (an accent typed as a combining mark) was the pieces 'cafe' and a bare accent; the shapes
    tokenizer normalises to NFC first and reads the one word 'café', as it reads the composed spelling."""
    from imgalign.pretrain.tokenizer import unknown_words

    decomposed, composed = "a cafe\u0301 circle", "a caf\u00e9 circle"
    assert prompt_pieces(decomposed) == prompt_pieces(composed) == ["a", "caf\u00e9", "circle"]
    assert unknown_words(decomposed) == unknown_words(composed) == ["caf\u00e9"]

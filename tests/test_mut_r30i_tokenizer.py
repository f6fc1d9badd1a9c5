"""Mutation round 30i: prompt_pieces normalises to NFC as the shapes tokenizer's normalizer does, not NFKC: a
fullwidth 'ａ' or the ligature 'ﬁ' is kept as typed (the tokenizer reads other bytes than 'a' or 'fi')."""

from __future__ import annotations

from transformers import CLIPTokenizer

from imgalign.pretrain.tokenizer import prompt_pieces, unknown_words
from imgalign.shapes_models import embedded_path


def test_compatibility_characters_are_not_folded() -> None:
    prompt = "\uff41 \ufb01le circle"  # fullwidth a, the fi ligature
    assert prompt_pieces(prompt) == ["\uff41", "\ufb01le", "circle"]
    assert unknown_words(prompt) == ["\uff41", "\ufb01le"]  # 'a' is a shapes word; the fullwidth one is not
    tok = CLIPTokenizer.from_pretrained(embedded_path("shapes") / "tokenizer").backend_tokenizer
    assert tok.normalizer.normalize_str(prompt) == prompt

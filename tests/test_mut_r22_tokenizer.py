"""imgalign.pretrain.tokenizer, mutation round 22: the tokenizer pretraining writes is the shipped model's own."""

from __future__ import annotations

import json

from imgalign.hub import embedded_path
from imgalign.pretrain.tokenizer import build_vocab, shapes_words


def test_the_built_vocabulary_and_merges_are_the_shipped_tokenizers() -> None:
    """The shipped text encoders' embedding rows are indexed by these ids: a vocabulary built another way (merging
    right to left, say) still makes every word one token, but gives the words other ids than the shipped model
    learned, so a pretraining resumed from, or compared with, the shipped model reads other words."""
    shipped = json.loads((embedded_path("shapes") / "tokenizer" / "tokenizer.json").read_text())["model"]
    vocab, merges = build_vocab(tuple(shapes_words()))
    assert vocab == shipped["vocab"]
    assert [tuple(m.split()) if isinstance(m, str) else tuple(m) for m in shipped["merges"]] == merges


def test_a_saved_tokenizer_pads_and_marks_prompts_as_the_shipped_one(tmp_path) -> None:
    """The SD3 pipeline pads every prompt to the tokenizer's length with its pad token, and the CLIP encoders read
    the pooled embedding at the end-of-text token: a saved tokenizer gives the shipped one's ids, padding and unknown
    token included."""
    from transformers import CLIPTokenizer

    from imgalign.pretrain.tokenizer import save_tokenizer

    shipped = CLIPTokenizer.from_pretrained(embedded_path("shapes") / "tokenizer")
    saved = save_tokenizer(tmp_path / "tok", shipped.model_max_length)
    for tok in (saved, CLIPTokenizer.from_pretrained(tmp_path / "tok")):
        for name in ("bos_token", "eos_token", "pad_token", "unk_token", "model_max_length"):
            assert getattr(tok, name) == getattr(shipped, name), name
        for prompt in ("a photo of a red circle", "two blue crosses & a zebra"):
            want = shipped(prompt, padding="max_length", truncation=True).input_ids
            assert tok(prompt, padding="max_length", truncation=True).input_ids == want

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

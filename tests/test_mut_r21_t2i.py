"""imgalign.pretrain.t2i: settings refused before any render or training step (mutation round 21)."""

from __future__ import annotations

import pytest

from imgalign.pretrain.t2i import Config, build_text_encoder


def test_an_odd_text_width_is_refused_before_the_autoencoder_stage(tmp_path) -> None:
    """Each text encoder has 2 attention heads: an odd width passed validation and failed only when the text
    encoders were built, after the renders and the whole autoencoder stage, with a transformers traceback."""
    from imgalign.pretrain.tokenizer import save_tokenizer

    with pytest.raises(ValueError, match=r"text_width must be even \(got 63\).*--set text_width=N"):
        Config(text_width=63).validate()
    cfg = Config(text_width=62)
    cfg.validate()
    tok = save_tokenizer(tmp_path / "tokenizer", cfg.max_length)
    assert build_text_encoder(cfg, tok, 1).config.hidden_size == 62

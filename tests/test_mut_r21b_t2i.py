"""imgalign.pretrain.t2i: the transformer's text inputs are exactly the two text encoders' outputs (round 21b)."""

from __future__ import annotations

import pytest

from imgalign.pretrain.t2i import Config, build_transformer


@pytest.mark.parametrize("width", [16, 32, 64])
def test_the_transformer_reads_the_two_text_encoders_concatenated_with_no_padding(width: int) -> None:
    """SD3 concatenates the hidden states (and pooled outputs) of the two CLIP text encoders, each `text_width`
    wide: the transformer's context and pooled projections take 2 * text_width features, at every width. A fixed
    floor (128 below width 64) made narrow models zero-pad their prompts and save a larger context projection
    than their text encoders can fill (T27)."""
    cfg = Config(text_width=width, layers=1, heads=1, patch=2)
    transformer = build_transformer(cfg)
    assert transformer.config.joint_attention_dim == 2 * width
    assert transformer.config.pooled_projection_dim == 2 * width
    assert transformer.context_embedder.in_features == 2 * width

"""Round 25 mutants of trainers/testing.py (the helpers the tests and benches share) that no test reached."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from imgalign.trainers.testing import positive_int, tiny_clip_tokenizer, tiny_transformers_clip


def test_positive_int_takes_one_and_up_and_refuses_zero_negatives_and_words() -> None:
    assert (positive_int("1"), positive_int("12")) == (1, 12)
    for text, says in (("0", "must be at least 1, got 0"), ("-3", "got -3"), ("2.5", "got '2.5'")):
        with pytest.raises(argparse.ArgumentTypeError, match=says):
            positive_int(text)


def test_the_tiny_clip_tokenizer_pads_with_the_id_its_models_are_built_with() -> None:
    # tiny_transformers_clip and the tiny pipelines' text encoders say pad_token_id=2: the "!" token
    tok = tiny_clip_tokenizer()
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (0, 1, 2)
    assert tok("ab", padding="max_length", max_length=6)["input_ids"] == [
        0,
        tok.get_vocab()["a"],
        tok.get_vocab()["b</w>"],
        1,
        2,
        2,
    ]


def test_a_tiny_clip_with_a_crop_resizes_its_shortest_edge_first_then_crops_for_its_vision_tower(
    tmp_path: Path,
) -> None:
    from transformers import CLIPConfig, CLIPImageProcessor

    folder = tiny_transformers_clip(tmp_path / "clip", image_size=40, crop=32)
    proc = CLIPImageProcessor.from_pretrained(folder)
    assert (proc.size, proc.crop_size) == ({"shortest_edge": 40}, {"height": 32, "width": 32})
    assert CLIPConfig.from_pretrained(folder).vision_config.image_size == 32

"""Units of the real-model GenEval suite (:mod:`imgalign.eval.real`) that test_real_eval.py left unchecked
(mutation round 13): prompt sets, label and box handling, the judge's checks. No model weights load."""

from __future__ import annotations

import pytest

from imgalign.eval import real


def test_a_generated_prompt_set_takes_exactly_one_integer_seed():
    """generate:1:2 took the last field as the seed (2) instead of refusing the spec."""
    for bad in ("generate:1:2", "generate:", "generate:1.5", "generate: 5", "generate:1_0", "generate:+3"):
        with pytest.raises(ValueError, match=r"expected generate:SEED with an integer seed"):
            real.load_prompt_set(bad)
    with pytest.raises(ValueError, match=r"the seed of generate:SEED must be 0 or more"):
        real.load_prompt_set("generate:-1")


def test_a_class_the_detector_cannot_find_is_refused_with_the_names_to_use():
    """The advice (GenEval's COCO names, where to find them, or a zero-shot detector) was in no test."""
    meta = {
        "tag": "single_object",
        "include": [{"class": "unicorn", "count": 1}],
        "prompt": "a photo of a unicorn",
    }
    with pytest.raises(ValueError) as e:
        real.validate_real_metadata(meta, real.COCO_CLASSES)
    assert str(e.value) == (
        "class 'unicorn' is not one the detector can find; use GenEval's COCO class names "
        "(imgalign.eval.real.COCO_CLASSES) or a zero-shot detector"
    )


def test_clip_is_loaded_for_a_colour_clause_in_any_include_clause(monkeypatch):
    """A prompt whose second object alone has a colour still needs the colour classifier."""

    class Det:
        def __init__(self, model, **kw) -> None:
            self.classes = list(kw["classes"])

    loaded = []
    monkeypatch.setattr(real, "HFDetector", Det)
    monkeypatch.setattr(real, "ClipColorClassifier", lambda clip, **kw: loaded.append(clip) or "clip")
    meta = {
        "tag": "color_attr",
        "include": [{"class": "cat", "count": 1}, {"class": "dog", "count": 1, "color": "red"}],
        "prompt": "a photo of a cat and a red dog",
    }
    _, color, _ = real.build_judge("det", "ViT-B-32:openai", [meta])
    assert color == "clip" and loaded == ["ViT-B-32:openai"]
    _, color, _ = real.build_judge("det", "ViT-B-32:openai", [{**meta, "include": meta["include"][:1]}])
    assert color is real.no_color

"""``geneval`` reward (rewards/geneval.py): the messages users act on and the checks each path runs (mutation
round 10)."""

from __future__ import annotations

import pytest

from imgalign.rewards.geneval import check_shapes_vocabulary


def test_a_class_the_shapes_detector_never_finds_says_how_to_judge_real_images() -> None:
    """A COCO class on the shapes detector scores 0 on every image: the error lists the shapes and says to give a
    real detector and colour classifier for real images."""
    with pytest.raises(ValueError) as e:
        check_shapes_vocabulary({"include": [{"class": "dog", "count": 1}]})
    msg = str(e.value)
    assert "circle" in msg and "square" in msg
    assert msg.endswith("for real images give geneval:detector=...,clip=...")


def test_check_metadata_refuses_a_row_without_include_clauses() -> None:
    """A row with a tag but no include clauses is refused up front, as scoring it would be (and an empty row too)."""
    from imgalign.rewards.geneval import GenEvalReward

    reward = GenEvalReward()
    for row in ({"prompt": "a photo of a circle", "tag": "single_object"}, {}):
        with pytest.raises(ValueError, match=r"has no GenEval metadata \('tag' and 'include'\)"):
            reward.check_metadata([row])


def test_scoring_a_class_outside_the_vocabulary_names_the_prompt() -> None:
    """score() refuses what check_metadata refuses with the same words: the error names the reward and the prompt
    (it gave the vocabulary error alone, without either)."""
    import torch

    from imgalign.rewards.geneval import GenEvalReward

    meta = {"prompt": "a photo of a dog", "tag": "single_object", "include": [{"class": "dog", "count": 1}]}
    with pytest.raises(ValueError, match=r"^geneval reward: prompt 'a photo of a dog': .*circle"):
        GenEvalReward()(torch.zeros(1, 3, 8, 8), ["a photo of a dog"], [meta])


def test_a_null_colour_is_refused_with_the_advice_to_leave_the_key_out() -> None:
    """``"color": None`` (metadata built in Python; the prompt loaders refuse null) passed the check, and the judge
    then looked for objects of colour None: every image scored 0 ("expected None square>=1, found 0 None")."""
    with pytest.raises(
        ValueError, match=r"exclude\[0\].color None is not a shapes-world colour .*leave the key out"
    ):
        check_shapes_vocabulary(
            {"include": [{"class": "circle", "count": 1}], "exclude": [{"class": "square", "color": None}]}
        )
    check_shapes_vocabulary({"include": [{"class": "circle", "count": 1}]})  # no colour: any colour

"""``geneval`` reward (rewards/geneval.py): what its up-front metadata checks refuse and say (mutation round 15)."""

from __future__ import annotations

import pytest

from imgalign import shapes as W
from imgalign.rewards.geneval import check_shapes_vocabulary


def test_an_empty_colour_is_refused_and_the_error_lists_the_shapes_colours() -> None:
    """A clause whose colour is the empty string (the prompt loaders let it through) matches no detection, as the
    shapes detector names every colour, so each image would score 0 without a word: it is refused like any other
    unknown colour, and the error lists the colours the shapes world draws."""
    with pytest.raises(ValueError) as e:
        check_shapes_vocabulary({"include": [{"class": "circle", "count": 1, "color": ""}]})
    msg = str(e.value)
    assert msg.startswith("include[0].color '' is not a shapes-world colour")
    assert msg.endswith(f"({', '.join(W.COLORS)})")


def test_a_real_judge_is_checked_then_built_on_the_rewards_device_and_dtype(monkeypatch) -> None:
    """geneval:detector=...,clip=... checks both judges' names, then builds them on the reward's own device and dtype
    (a reward on cuda that loaded its detector on the CPU judged every image there); the judge's colour classifier
    and prompt check are the reward's."""
    import torch

    import imgalign.eval.real as real
    from imgalign.rewards.geneval import GenEvalReward

    seen: dict = {}

    def build_judge(detector, clip, metas, device="cpu", dtype=torch.float32):
        seen["built"] = (detector, clip, metas, device, dtype)
        return "detector", "colour", check_shapes_vocabulary

    monkeypatch.setattr(
        real, "check_judge_specs", lambda detector, clip: seen.update(checked=(detector, clip))
    )
    monkeypatch.setattr(real, "build_judge", build_judge)
    reward = GenEvalReward(device="cuda:3", dtype=torch.float16, detector="det", clip="ViT-B-32:openai")
    assert seen == {
        "checked": ("det", "ViT-B-32:openai"),
        "built": ("det", "ViT-B-32:openai", None, torch.device("cuda:3"), torch.float16),
    }
    assert (reward.detector, reward.color, reward.validate) == ("detector", "colour", check_shapes_vocabulary)


def test_a_row_without_metadata_and_a_batch_with_one_such_row_are_refused_by_name() -> None:
    """check_metadata refuses a row that is None (a plain prompt) with its words, not a TypeError; scoring refuses a
    batch in which any one row lacks GenEval metadata, before judging the others."""
    import torch

    from imgalign.rewards.geneval import GenEvalReward

    reward = GenEvalReward()
    with pytest.raises(ValueError, match=r"^geneval reward: prompt None has no GenEval metadata"):
        reward.check_metadata([None])  # type: ignore[list-item]
    good = {
        "prompt": "a photo of a circle",
        "tag": "single_object",
        "include": [{"class": "circle", "count": 1}],
    }
    bad = {"prompt": "a photo of a square", "tag": "single_object"}
    with pytest.raises(
        ValueError, match=r"^geneval reward needs GenEval metadata with 'tag' and 'include' for every"
    ):
        reward(torch.zeros(2, 3, 8, 8), [good["prompt"], bad["prompt"]], [good, bad])

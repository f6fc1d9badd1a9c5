"""Mutation round 21: the geneval reward (rewards/geneval.py) judges with its own colour classifier and gives an
image the strict rules pass full soft credit."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from imgalign.eval.geneval import Detection
from imgalign.rewards.geneval import GenEvalReward, check_shapes_vocabulary

IMAGES = torch.full((1, 3, 16, 16), 0.5)


def test_a_real_judges_colour_classifier_decides_the_colour(monkeypatch: pytest.MonkeyPatch) -> None:
    """With detector=...,clip=... the detections carry no colour: the colour classifier the judge was built with
    names it (without it every colour clause failed and each image scored 0)."""
    import imgalign.eval.real as real

    asked: list[str] = []

    def colour(image: Any, dets: list[Detection], classname: str) -> list[str]:
        asked.append(classname)
        return ["red"] * len(dets)

    def detector(image: Any) -> dict[str, list[Detection]]:
        return {"circle": [Detection((2, 2, 8, 8), 0.9)]}

    monkeypatch.setattr(real, "check_judge_specs", lambda detector, clip: None)
    monkeypatch.setattr(real, "build_judge", lambda *a, **k: (detector, colour, check_shapes_vocabulary))
    reward = GenEvalReward(mode="strict", detector="det", clip="ViT-B-32:openai")
    meta = {
        "prompt": "a photo of a red circle",
        "tag": "color_attr",
        "include": [{"class": "circle", "count": 1, "color": "red"}],
    }
    out = reward.score(IMAGES, [meta["prompt"]], [meta])
    assert out.scores.tolist() == [1.0] and "circle" in asked


def test_soft_credit_of_an_image_the_strict_rules_pass_is_one() -> None:
    """Two circles asked, two found above the counting threshold and a faint third below it: the strict rules pass
    (the faint one is filtered out), so the soft credit is 1, not the ramp's 1 - 0.5/0.9/2 for the faint one."""
    reward = GenEvalReward(mode="soft")
    raw = {
        "circle": [
            Detection((0, 0, 4, 4), 0.95),
            Detection((8, 8, 12, 12), 0.95),
            Detection((4, 8, 8, 12), 0.5),
        ]
    }
    reward.detector = lambda image: raw
    meta = {
        "prompt": "a photo of two circles",
        "tag": "counting",
        "include": [{"class": "circle", "count": 2}],
        "exclude": [{"class": "circle", "count": 3}],
    }
    out = reward.score(IMAGES, [meta["prompt"]], [meta])
    assert out.scores.tolist() == [1.0] and out.details[0]["correct"] is True

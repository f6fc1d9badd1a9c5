"""Edges of GenEval's decision rules (`imgalign.eval.geneval`) and of the real suite's helpers
(`imgalign.eval.real`) that the main rule tests leave open (mutation round 11b)."""

from __future__ import annotations

import pytest

from imgalign.eval.geneval import Detection, judge, soft_credit, summarize


def det(x0: float, y0: float, score: float = 0.95, color: str | None = None, w: float = 10.0) -> Detection:
    return Detection(box=(x0, y0, x0 + w, y0 + 10.0), score=score, color=color)


def test_a_colour_clause_of_count_two_needs_two_objects_of_the_colour():
    """`count` objects of the colour are needed, not one: one white cup of two fails, 1 of 2 credited."""
    meta = {
        "tag": "colors",
        "include": [{"class": "cup", "count": 2, "color": "white"}],
        "prompt": "a photo of two white cups",
    }
    j = judge(None, {"cup": [det(0, 0, color="white"), det(20, 0, score=0.9, color="red")]}, meta)
    assert not j.correct and j.partial == pytest.approx(0.5)
    assert j.reason == "expected white cup>=2, found 1 white; and 1 red, 1 white"


def test_an_image_the_rules_pass_earns_full_partial_credit():
    """A passing image scores 1 even where the exclude count leaves room above `count` (here 3 of >= 2, < 4
    clocks): the clause's 1 - |2 - 3| / 2 is not what a correct image earns."""
    meta = {
        "tag": "counting",
        "include": [{"class": "clock", "count": 2}],
        "exclude": [{"class": "clock", "count": 4}],
        "prompt": "a photo of two clocks",
    }
    j = judge(None, {"clock": [det(0, 0), det(20, 0), det(40, 0)]}, meta)
    assert j.correct and j.partial == 1.0


def test_soft_credit_places_an_object_by_its_worst_target():
    """A dog right of one kite but left of the other earns nothing for its position clause (the worst margin over
    the target clause's objects, as the strict rules check every pair), while the kites' clause is met."""
    meta = {
        "tag": "position",
        "include": [{"class": "kite", "count": 2}, {"class": "dog", "count": 1, "position": ["right of", 0]}],
        "prompt": "a photo of a dog right of two kites",
    }
    raw = {"kite": [det(20, 0), det(80, 0, score=0.9)], "dog": [det(50, 0)]}
    assert not judge(None, raw, meta).correct
    assert soft_credit(None, raw, meta) == pytest.approx(0.5)


def test_an_empty_summary_scores_zero():
    assert summarize([]) == (0.0, {})


def bare_detector(min_score: float) -> object:
    """An HFDetector without a model (its post-processing alone), as tests/test_real_eval.py builds one."""
    import torch

    from imgalign.eval.real import HFDetector

    d = object.__new__(HFDetector)
    d.kind, d.min_score, d.nms_iou, d.query_chunk = "detr", min_score, None, None
    d.template = "a photo of a {}"
    d.device, d.dtype = torch.device("cpu"), torch.float32
    return d


def test_a_detection_of_exactly_min_score_is_kept():
    """`min_score` is inclusive, for closed-set detections and for zero-shot boxes given their best class alike."""
    import torch

    d = bare_detector(0.25)
    found: dict = {}
    d._add(found, "cat", (0.0, 0.0, 10.0, 10.0), 0.25, (96, 40))
    d._add(found, "cat", (20.0, 0.0, 30.0, 10.0), 0.2, (96, 40))
    assert [x.score for x in found["cat"]] == [0.25]
    found = {}
    scores = torch.tensor([[0.25, 0.125], [0.125, 0.2]])
    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [20.0, 0.0, 30.0, 10.0]])
    d._best_class(found, ["cat", "dog"], scores, boxes, (96, 40))
    assert list(found) == ["cat"] and [x.score for x in found["cat"]] == [0.25]


def test_a_detection_under_a_pixel_tall_is_dropped():
    """Sub-pixel boxes are dropped on either axis, not only when too narrow."""
    d = bare_detector(0.1)
    found: dict = {}
    d._add(found, "cat", (0.0, 10.0, 10.0, 10.5), 0.9, (96, 40))
    d._add(found, "cat", (0.0, 38.0, 10.0, 45.0), 0.9, (96, 40))  # 2 px tall once clipped
    d._add(found, "cat", (0.0, 40.5, 10.0, 45.0), 0.9, (96, 40))  # below the image: dropped
    assert [x.box for x in found["cat"]] == [(0.0, 38.0, 10.0, 40.0)]

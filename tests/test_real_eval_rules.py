"""GenEval's decision rules (`imgalign.eval.geneval`) on hand-built detections, as the official evaluate_images.py
decides them: thresholds 0.3 / 0.9 (strictly greater), at most 16 per class, the exclude clause, colour on the
top-`count` detections, relations after the 0.1 x box-size margin at +-0.5, and missing targets."""

from __future__ import annotations

import pytest

from imgalign.eval.geneval import MAX_OBJECTS, Detection, filter_detections, judge, summarize


def det(
    x0: float, y0: float, w: float = 10.0, h: float = 10.0, score: float = 0.95, color: str | None = None
):
    return Detection(box=(x0, y0, x0 + w, y0 + h), score=score, color=color)


def counting(cls: str, n: int) -> dict:
    return {
        "tag": "counting",
        "include": [{"class": cls, "count": n}],
        "exclude": [{"class": cls, "count": n + 1}],
        "prompt": f"a photo of {n} {cls}s",
    }


# ---- thresholds -----------------------------------------------------------------------------------------------
def test_confidence_threshold_is_strictly_above_0_3_and_0_9_on_counting():
    raw = {
        "clock": [det(0, 0, score=0.3), det(20, 0, score=0.31), det(40, 0, score=0.9), det(60, 0, score=0.91)]
    }
    assert [d.score for d in filter_detections(raw, "single_object")["clock"]] == [0.91, 0.9, 0.31]
    assert [d.score for d in filter_detections(raw, "counting")["clock"]] == [0.91]
    assert filter_detections({"clock": [det(0, 0, score=0.3)]}, "colors") == {}


def test_at_most_16_per_class_highest_first():
    raw = {"cup": [det(i * 11, 0, score=0.4 + 0.01 * i) for i in range(20)]}
    kept = filter_detections(raw, "single_object")["cup"]
    assert MAX_OBJECTS == 16 and len(kept) == 16
    assert kept[0].score == pytest.approx(0.59) and kept[-1].score == pytest.approx(0.44)


# ---- counting and the exclude clause ------------------------------------------------------------------------
def test_counting_exactly_n_with_the_0_9_threshold():
    meta = counting("clock", 2)
    assert judge(None, {"clock": [det(0, 0), det(20, 0)]}, meta).correct
    # a third clock at 0.85 is below the counting threshold: still exactly two
    assert judge(None, {"clock": [det(0, 0), det(20, 0), det(40, 0, score=0.85)]}, meta).correct
    j = judge(None, {"clock": [det(0, 0), det(20, 0), det(40, 0, score=0.91)]}, meta)
    assert not j.correct and j.reason == "expected clock<3, found 3"
    j = judge(None, {"clock": [det(0, 0), det(20, 0, score=0.89)]}, meta)
    assert not j.correct and j.reason == "expected clock>=2, found 1"


def test_counting_partial_credit():
    meta = counting("apple", 4)
    assert judge(None, {"apple": [det(i * 20, 0) for i in range(3)]}, meta).partial == pytest.approx(0.75)
    # five found: 1 - |4 - 5| / 4, not the capped 4-of-4 of the include clause
    j = judge(None, {"apple": [det(i * 20, 0) for i in range(5)]}, meta)
    assert not j.correct and j.partial == pytest.approx(0.75)


def test_two_objects_need_both_and_other_classes_do_not_matter():
    meta = {
        "tag": "two_object",
        "include": [{"class": "bench", "count": 1}, {"class": "sports ball", "count": 1}],
        "prompt": "a photo of a bench and a sports ball",
    }
    assert judge(None, {"bench": [det(0, 0)], "sports ball": [det(30, 0)], "dog": [det(50, 0)]}, meta).correct
    j = judge(None, {"bench": [det(0, 0)], "sports ball": [det(30, 0, score=0.2)]}, meta)
    assert not j.correct and j.reason == "expected sports ball>=1, found 0"


# ---- colour -----------------------------------------------------------------------------------------------------
def test_colour_is_judged_on_the_most_confident_detection_only():
    meta = {
        "tag": "colors",
        "include": [{"class": "car", "count": 1, "color": "blue"}],
        "prompt": "a photo of a blue car",
    }
    assert judge(None, {"car": [det(0, 0, color="blue")]}, meta).correct
    # a blue car exists, but the most confident car is red
    raw = {"car": [det(0, 0, score=0.9, color="red"), det(20, 0, score=0.8, color="blue")]}
    j = judge(None, raw, meta)
    assert not j.correct and j.reason == "expected blue car>=1, found 0 blue; and 1 red"


def test_colour_attribute_needs_both_clauses():
    meta = {
        "tag": "color_attr",
        "include": [
            {"class": "bus", "count": 1, "color": "green"},
            {"class": "microwave", "count": 1, "color": "purple"},
        ],
        "prompt": "a photo of a green bus and a purple microwave",
    }
    good = {"bus": [det(0, 0, color="green")], "microwave": [det(30, 0, color="purple")]}
    assert judge(None, good, meta).correct
    swapped = {"bus": [det(0, 0, color="purple")], "microwave": [det(30, 0, color="green")]}
    j = judge(None, swapped, meta)
    assert not j.correct and j.partial == 0.0
    assert j.reason.splitlines() == [
        "expected green bus>=1, found 0 green; and 1 purple",
        "expected purple microwave>=1, found 0 purple; and 1 green",
    ]


def test_colour_function_receives_the_top_count_detections():
    seen = []

    def color_fn(image, dets, classname):
        seen.append((classname, [d.score for d in dets]))
        return ["white"] * len(dets)

    meta = {
        "tag": "colors",
        "include": [{"class": "cup", "count": 2, "color": "white"}],
        "prompt": "a photo of two white cups",
    }
    raw = {"cup": [det(0, 0, score=0.5), det(20, 0, score=0.7), det(40, 0, score=0.6)]}
    assert judge("image", raw, meta, color_fn).correct
    assert seen == [("cup", [0.7, 0.6])]


# ---- position -------------------------------------------------------------------------------------------------
def position(rel: str) -> dict:
    return {
        "tag": "position",
        "include": [{"class": "kite", "count": 1}, {"class": "dog", "count": 1, "position": [rel, 0]}],
        "prompt": f"a photo of a dog {rel} a kite",
    }


# Target 10x10 at the origin, object 10x10 offset by d along one axis: the margin 0.1 x (10 + 10) = 2 leaves
# (d - 2) / d, which is beyond 0.5 only when d > 4. So d = 4 fails (exactly 0.5) and d = 4.1 passes.
@pytest.mark.parametrize(
    "rel, dx, dy",
    [("right of", 1, 0), ("left of", -1, 0), ("below", 0, 1), ("above", 0, -1)],  # y points down
)
def test_each_relation_at_the_margin_and_the_half_threshold(rel, dx, dy):
    kite = det(0, 0)
    for d, ok in ((4.1, True), (4.0, False), (1.0, False), (-4.1, False)):
        raw = {"kite": [kite], "dog": [det(dx * d, dy * d)]}
        j = judge(None, raw, position(rel))
        assert j.correct is ok, (rel, d, j.reason)
        if not ok:
            assert j.reason.startswith(f"expected dog {rel} target, found ")


def test_diagonal_offset_is_neither_relation():
    # offset (6, 6): margin leaves (4, 4) / |(6, 6)| = 0.471 on each axis, under 0.5
    raw = {"kite": [det(0, 0)], "dog": [det(6, 6)]}
    assert not judge(None, raw, position("right of")).correct
    assert not judge(None, raw, position("below")).correct
    # offset (10, 3): (8, 1) / 10.44 = (0.766, 0.096): right of, not below
    raw = {"kite": [det(0, 0)], "dog": [det(10, 3)]}
    assert judge(None, raw, position("right of")).correct
    assert not judge(None, raw, position("below")).correct


def test_box_sizes_widen_the_margin():
    # 30-wide boxes: margin 0.1 x 60 = 6 on x; offset 11 gives 5 / 11 = 0.45 (fails), offset 13 gives 0.54
    raw = {"kite": [det(0, 0, w=30)], "dog": [det(11, 0, w=30)]}
    assert not judge(None, raw, position("right of")).correct
    raw = {"kite": [det(0, 0, w=30)], "dog": [det(13, 0, w=30)]}
    assert judge(None, raw, position("right of")).correct


def test_missing_target_and_missing_object():
    j = judge(None, {"dog": [det(20, 0)]}, position("right of"))
    assert not j.correct
    assert j.reason.splitlines() == ["expected kite>=1, found 0", "no target for dog to be right of"]
    assert j.partial == 0.0
    j = judge(None, {"kite": [det(0, 0)]}, position("right of"))
    assert not j.correct and j.reason == "expected dog>=1, found 0" and j.partial == pytest.approx(0.5)


def test_every_object_of_a_position_clause_against_every_object_of_its_target():
    """With counts above 1 (the rules allow them, GenEval's own file has none), each of the clause's objects is
    checked against each of the target clause's objects, as evaluate_images.py loops."""
    meta = {
        "tag": "position",
        "include": [{"class": "kite", "count": 2}, {"class": "dog", "count": 2, "position": ["right of", 0]}],
        "prompt": "a photo of two dogs right of two kites",
    }
    kites = [det(20, 0), det(20, 3, score=0.9)]
    # the second dog is left of the kites: the clause fails, with 1 of its 2 dogs placed
    j = judge(None, {"kite": kites, "dog": [det(60, 0), det(0, 3, score=0.9)]}, meta)
    assert not j.correct and j.partial == pytest.approx((1.0 + 0.5) / 2)
    assert judge(None, {"kite": kites, "dog": [det(60, 0), det(60, 3, score=0.9)]}, meta).correct
    # both dogs right of the first kite but left of the second: no dog is right of every kite
    kites = [det(20, 0), det(80, 0, score=0.9)]
    j = judge(None, {"kite": kites, "dog": [det(50, 0), det(50, 3, score=0.9)]}, meta)
    assert not j.correct and j.partial == pytest.approx(0.5)


def test_target_that_failed_its_colour_is_no_target():
    meta = {
        "tag": "position",
        "include": [
            {"class": "kite", "count": 1, "color": "red"},
            {"class": "dog", "count": 1, "position": ["right of", 0]},
        ],
        "prompt": "a photo of a dog right of a red kite",
    }
    raw = {"kite": [det(0, 0, color="blue")], "dog": [det(20, 0)]}
    j = judge(None, raw, meta)
    assert not j.correct and j.reason.splitlines()[-1] == "no target for dog to be right of"


# ---- scores -----------------------------------------------------------------------------------------------------
def test_overall_is_the_plain_mean_of_task_scores():
    rows = [{"tag": "counting", "correct": c} for c in (True, False, False, False)]
    rows += [{"tag": "colors", "correct": True}]
    overall, tasks = summarize(rows)
    assert tasks == {"colors": 1.0, "counting": 0.25}
    assert overall == pytest.approx(0.625)  # not the image-weighted 2/5

"""Round 24 mutation survivors of `imgalign.eval.geneval`: the strict position rule against every object of the
target clause, the task order of the summary, and the dense credit's counting threshold, absent-class sum, cap on
the best 16 detections and targets of a third clause."""

from __future__ import annotations

import pytest

from imgalign.eval.geneval import Detection, judge, soft_credit, summarize


def det(x0: float, y0: float, score: float = 0.95, color: str | None = None) -> Detection:
    return Detection(box=(x0, y0, x0 + 10.0, y0 + 10.0), score=score, color=color)


def test_a_position_clause_must_hold_against_every_object_of_its_target_clause() -> None:
    # the triangle is left of the first circle but right of the second: GenEval checks every target object
    meta = {
        "tag": "position",
        "include": [
            {"class": "circle", "count": 2},
            {"class": "triangle", "count": 1, "position": ["left of", 0]},
        ],
    }
    raw = {"circle": [det(60, 0, 0.99), det(0, 0, 0.98)], "triangle": [det(30, 0)]}
    verdict = judge(None, raw, meta)
    assert not verdict.correct
    assert "expected triangle left of target, found right of target" in verdict.reason
    assert judge(
        None, {"circle": [det(60, 0, 0.99), det(80, 0, 0.98)], "triangle": [det(30, 0)]}, meta
    ).correct


def test_summarize_lists_the_tasks_in_name_order_whatever_the_row_order() -> None:
    rows = [
        {"tag": "position", "correct": True},
        {"tag": "colors", "correct": False},
        {"tag": "counting", "correct": True},
        {"tag": "colors", "correct": True},
    ]
    overall, tasks = summarize(rows)
    assert list(tasks) == ["colors", "counting", "position"]
    assert tasks == {"colors": 0.5, "counting": 1.0, "position": 1.0}
    assert overall == pytest.approx(2.5 / 3)


def test_soft_credit_weighs_further_counting_objects_against_the_counting_threshold() -> None:
    # three squares asked for; the third is a weak 0.45 (under 0.9, so the strict rules fail), a fourth at 0.3 is
    # over: its weight is 0.3 / 0.9 (the counting threshold), not 0.3 / 0.3
    meta = {
        "tag": "counting",
        "include": [{"class": "square", "count": 3}],
        "exclude": [{"class": "square", "count": 4}],
    }
    raw = {"square": [det(0, 0, 0.95), det(20, 0, 0.95), det(40, 0, 0.45), det(60, 0, 0.3)]}
    assert not judge(None, raw, meta).correct
    assert soft_credit(None, raw, meta) == pytest.approx((1 + 1 + 0.5 - 1 / 3) / 3)


def test_soft_credit_of_a_class_that_must_be_absent_sums_every_detection_of_it() -> None:
    # no circle (so the strict rules fail); two faint squares under 0.3 each cost 1/3 of the absent clause
    meta = {
        "tag": "two_object",
        "include": [{"class": "circle", "count": 1}],
        "exclude": [{"class": "square", "count": 1}],
    }
    raw = {"square": [det(0, 0, 0.1), det(30, 0, 0.1)]}
    assert not judge(None, raw, meta).correct
    assert soft_credit(None, raw, meta) == pytest.approx((0.0 + (1 - 2 / 3)) / 2)


def test_soft_credit_keeps_the_best_sixteen_detections_of_a_class_not_the_first() -> None:
    # sixteen faint circles listed before a clear one: the cap keeps the 16 highest scores
    meta = {"tag": "counting", "include": [{"class": "circle", "count": 2}]}
    raw = {"circle": [det(12 * i, 0, 0.09) for i in range(16)] + [det(0, 50, 0.95)]}
    assert not judge(None, raw, meta).correct
    assert soft_credit(None, raw, meta) == pytest.approx((1 + 0.1) / 2)


def test_a_position_clause_is_judged_against_its_found_target_after_an_earlier_clause_failed() -> None:
    # clause 0 (a cross) is missing; clause 2 is placed against clause 1 (the square), which was found
    meta = {
        "tag": "position",
        "include": [
            {"class": "cross", "count": 1},
            {"class": "square", "count": 1},
            {"class": "triangle", "count": 1, "position": ["left of", 1]},
        ],
    }
    raw = {"square": [det(60, 0)], "triangle": [det(0, 0)]}
    verdict = judge(None, raw, meta)
    assert not verdict.correct
    assert verdict.reason == "expected cross>=1, found 0"
    assert verdict.partial == pytest.approx(2 / 3)


def test_an_object_of_another_class_earns_nothing_toward_a_class_its_detector_did_not_score() -> None:
    # the detector scored this object only as a square: it is no near-miss circle
    meta = {"tag": "single_object", "include": [{"class": "circle", "count": 1}]}
    square = Detection(box=(0.0, 0.0, 10.0, 10.0), score=0.95, class_scores={"square": 0.95})
    assert soft_credit(None, {"square": [square]}, meta) == 0.0
    square.class_scores = {"square": 0.95, "circle": 0.15}
    assert soft_credit(None, {"square": [square]}, meta) == pytest.approx(0.5 * 0.15 / 0.3)


def test_a_position_clause_naming_itself_as_its_target_earns_nothing_in_either_rule() -> None:
    # hand-made metadata: clause 1 is placed relative to clause 1; the strict rules say so, the dense credit gives
    # that clause 0 instead of an IndexError
    meta = {
        "tag": "position",
        "include": [
            {"class": "circle", "count": 1},
            {"class": "square", "count": 1, "position": ["left of", 1]},
        ],
    }
    raw = {"circle": [det(60, 0)], "square": [det(0, 0)]}
    verdict = judge(None, raw, meta)
    assert not verdict.correct and "no target for square to be left of" in verdict.reason
    assert soft_credit(None, raw, meta) == pytest.approx(0.5)

"""eval/geneval.py (mutation round 28f): a clause that has already failed (its colour) is not judged on its
position as well, neither in the partial credit nor in the reasons, and a failed position clause of several objects
gives one reason, not one per object."""

from __future__ import annotations

from imgalign.eval.geneval import Detection, judge


def det(x0: float, y0: float, score: float = 0.95, color: str | None = None) -> Detection:
    return Detection(box=(x0, y0, x0 + 10.0, y0 + 10.0), score=score, color=color)


def test_a_clause_of_the_wrong_colour_earns_nothing_for_a_right_position() -> None:
    """A red square right of the circle is asked for and a blue one is there, right of it: the clause fails on its
    colour and earns 0 (partial 0.5 over the two clauses), with the colour as its only reason. Judging the position
    of a clause that had already failed counted the blue square as a good object (partial 1.0 for a wrong image)."""
    meta = {
        "tag": "color_attr",
        "include": [
            {"class": "circle", "count": 1},
            {"class": "square", "count": 1, "color": "red", "position": ["right of", 0]},
        ],
    }
    raw = {"circle": [det(0, 20, color="green")], "square": [det(40, 20, color="blue")]}
    verdict = judge(None, raw, meta)
    assert not verdict.correct
    assert verdict.partial == 0.5
    assert verdict.reason == "expected red square>=1, found 0 red; and 1 blue"


def test_a_wrong_position_clause_of_two_objects_gives_one_reason() -> None:
    """Two triangles left of the circle are asked for and both are right of it: the clause fails once, with one
    reason (the first object's). Reporting every failing object repeated the clause's reason per object."""
    meta = {
        "tag": "position",
        "include": [
            {"class": "circle", "count": 1},
            {"class": "triangle", "count": 2, "position": ["left of", 0]},
        ],
    }
    raw = {"circle": [det(0, 20)], "triangle": [det(30, 20, 0.99), det(50, 20, 0.98)]}
    verdict = judge(None, raw, meta)
    assert not verdict.correct
    assert verdict.reason == "expected triangle left of target, found right of target"
    assert verdict.partial == 0.5

"""Round 22 mutation survivors of `imgalign.eval.geneval`: a detection without a colour, and soft credit of a
position clause whose target is not the first clause."""

from __future__ import annotations

from imgalign.eval.geneval import Detection, judge, soft_credit


def det(x0: float, y0: float, score: float = 0.95, color: str | None = None) -> Detection:
    return Detection(box=(x0, y0, x0 + 10.0, y0 + 10.0), score=score, color=color)


def test_a_detection_without_a_colour_matches_no_colour_clause() -> None:
    meta = {"tag": "colors", "include": [{"class": "circle", "count": 1, "color": "red"}]}
    verdict = judge(None, {"circle": [det(0, 0, color=None)]}, meta)
    assert not verdict.correct
    assert "found 0 red" in verdict.reason
    assert judge(None, {"circle": [det(0, 0, color="red")]}, meta).correct


def test_soft_credit_places_a_position_clause_against_the_clause_it_names() -> None:
    # the triangle is left of the square (clause 1) but right of the circle (clause 0); the cross is missing, so
    # the strict rules fail and the mean of the clauses' credits is returned
    meta = {
        "tag": "position",
        "include": [
            {"class": "circle", "count": 1},
            {"class": "square", "count": 1},
            {"class": "triangle", "count": 1, "position": ["left of", 1]},
            {"class": "cross", "count": 1},
        ],
    }
    raw = {"circle": [det(0, 0)], "square": [det(60, 0)], "triangle": [det(30, 0)]}
    assert not judge(None, raw, meta).correct
    assert soft_credit(None, raw, meta) == 0.75

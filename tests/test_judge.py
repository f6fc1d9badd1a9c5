import random

import numpy as np
import pytest

from imgalign import shapes as W
from imgalign.eval.geneval import Detection, evaluate, filter_detections, judge, soft_credit, summarize
from imgalign.eval.shapes_detector import ShapesDetector
from imgalign.prompts.shapes import build_eval_set
from imgalign.shapes import relation_margin

DET = ShapesDetector()
FLIP = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}


def corruptions(spec: W.Spec, rng: random.Random) -> list[tuple[str, W.Spec]]:
    """Specs that must NOT satisfy `spec`'s metadata: colour swapped, count +-1, relation flipped, object missing."""
    out = []
    inc = spec.include
    other_shape = lambda s: rng.choice([x for x in W.SHAPES if x != s])  # noqa: E731
    other_color = lambda c: rng.choice([x for x in W.COLORS if x != c])  # noqa: E731
    if spec.tag == "single_object":
        out.append(("object missing", W.single_object(other_shape(inc[0].shape))))
    elif spec.tag == "two_object":
        out.append(("object missing", W.single_object(inc[rng.randrange(2)].shape)))
    elif spec.tag == "counting":
        n = inc[0].count
        for m in (n - 1, n + 1):
            if 1 <= m <= 4:
                out.append((f"count {m - n:+d}", W.Spec("counting", (W.Clause(inc[0].shape, count=m),))))
    elif spec.tag == "colors":
        out.append(("colour swapped", W.colors(other_color(inc[0].color), inc[0].shape)))
    elif spec.tag == "position":
        rel = inc[1].position[0]
        out.append(("relation flipped", W.position(inc[1].shape, FLIP[rel], inc[0].shape)))
        out.append(("object missing", W.single_object(inc[0].shape)))
    elif spec.tag == "color_attr":
        a, b = inc
        if a.color != b.color:
            out.append(("colours swapped", W.color_attr(b.color, a.shape, a.color, b.shape)))
        out.append(("colour changed", W.color_attr(other_color(a.color), a.shape, b.color, b.shape)))
        out.append(("object missing", W.colors(a.color, a.shape)))
    return out


def test_ground_truth_is_judged_correct():
    rows = []
    for i, spec in enumerate(build_eval_set()):
        img, _ = W.render(spec, 1000 + i)
        j = judge(img, DET(img), spec.to_metadata())
        soft = soft_credit(img, DET(img), spec.to_metadata())
        rows.append(
            {"tag": spec.tag, "correct": j.correct, "partial": j.partial, "soft": soft, "reason": j.reason}
        )
    overall, tasks = summarize(rows)
    assert overall >= 0.99, [r for r in rows if not r["correct"]][:5]
    assert min(tasks.values()) >= 0.98
    assert all(r["partial"] == 1.0 and r["soft"] == 1.0 for r in rows if r["correct"])


def test_judge_discriminates_corrupted_specs():
    rng = random.Random(0)
    n = wrong = 0
    by_kind: dict[str, list[bool]] = {}
    for spec in build_eval_set():
        for kind, bad in corruptions(spec, rng):
            img, _ = W.render(bad, rng)
            rejected = not judge(img, DET(img), spec.to_metadata()).correct
            by_kind.setdefault(kind, []).append(rejected)
            n += 1
            wrong += not rejected
    assert n >= 300
    assert 1 - wrong / n >= 0.98, {k: float(np.mean(v)) for k, v in by_kind.items()}
    assert set(by_kind) >= {"colour swapped", "count -1", "count +1", "relation flipped", "object missing"}


def test_detector_boxes_and_colours_match_layout():
    spec = W.color_attr("blue", "square", "yellow", "triangle")
    img, objs = W.render(spec, 3)
    det = DET(img)
    assert set(det) == {"square", "triangle"}
    for o in objs:
        d = det[o.shape][0]
        assert d.color == o.color
        assert np.allclose(d.box, o.box, atol=1.01)
        assert d.score > 0.9


def test_detector_rejects_blobs_for_counting():
    """A ragged blob can pass the 0.3 threshold but not counting's 0.9."""
    arr = np.full((64, 64, 3), W.BACKGROUND, dtype=np.uint8)
    yy, xx = np.mgrid[:64, :64]
    blob = ((xx - 30) ** 2 / 180 + (yy - 30) ** 2 / 40 < 1) | ((xx - 38) ** 2 + (yy - 36) ** 2 < 30)
    arr[blob] = W.COLORS["red"]
    dets = [d for ds in DET(arr).values() for d in ds]
    assert len(dets) == 1 and dets[0].score < 0.9


def test_bad_image_shape_raises():
    with pytest.raises(ValueError, match="RGB"):
        DET(np.zeros((8, 8), dtype=np.uint8))


# ---- the decision rules on hand-built detections (GenEval's evaluate_images.py) ---------------------------------
def D(x0, y0, x1, y1, score=1.0, color=None):  # noqa: N802
    return Detection(box=(x0, y0, x1, y1), score=score, color=color)


def test_thresholds_and_counting_exclude():
    meta = {
        "tag": "counting",
        "include": [{"class": "circle", "count": 2}],
        "exclude": [{"class": "circle", "count": 3}],
    }
    two = {"circle": [D(0, 0, 10, 10, 0.95), D(20, 0, 30, 10, 0.95)]}
    assert judge(None, two, meta).correct
    # a third detection above 0.9 trips the exclude clause; one at 0.85 is filtered on counting prompts
    assert not judge(None, {"circle": two["circle"] + [D(40, 0, 50, 10, 0.91)]}, meta).correct
    assert judge(None, {"circle": two["circle"] + [D(40, 0, 50, 10, 0.85)]}, meta).correct
    # below 0.9 does not count on counting prompts, but 0.31 counts elsewhere
    weak = {"circle": [D(0, 0, 10, 10, 0.95), D(20, 0, 30, 10, 0.5)]}
    assert not judge(None, weak, meta).correct
    assert judge(
        None,
        {"circle": [D(0, 0, 9, 9, 0.31)]},
        {"tag": "single_object", "include": [{"class": "circle", "count": 1}]},
    ).correct
    assert not judge(
        None,
        {"circle": [D(0, 0, 9, 9, 0.3)]},
        {"tag": "single_object", "include": [{"class": "circle", "count": 1}]},
    ).correct
    # at most 16 detections per class survive
    many = {"circle": [D(i, 0, i + 1, 1, 0.99) for i in range(20)]}
    assert len(filter_detections(many, "counting")["circle"]) == 16


def test_partial_credit_counting():
    meta = {
        "tag": "counting",
        "include": [{"class": "circle", "count": 4}],
        "exclude": [{"class": "circle", "count": 5}],
    }
    three = {"circle": [D(i * 12, 0, i * 12 + 10, 10) for i in range(3)]}
    j = judge(None, three, meta)
    assert not j.correct and j.partial == pytest.approx(0.75)
    six = {"circle": [D(i * 10, 0, i * 10 + 8, 8) for i in range(6)]}
    assert judge(None, six, meta).partial == pytest.approx(0.5)
    # nine for four: 1 - 5 / 4 < 0 is clamped to no credit, by both rules
    nine = {"circle": [D(i * 10, 0, i * 10 + 8, 8) for i in range(9)]}
    assert judge(None, nine, meta).partial == 0.0 and soft_credit(None, nine, meta) == 0.0


def test_colour_clause():
    meta = {"tag": "colors", "include": [{"class": "square", "count": 1, "color": "red"}]}
    assert judge(None, {"square": [D(0, 0, 9, 9, color="red")]}, meta).correct
    j = judge(None, {"square": [D(0, 0, 9, 9, color="blue")]}, meta)
    assert not j.correct and "expected red square>=1, found 0 red; and 1 blue" in j.reason
    # the colour classifier only sees the top-`count` detections
    two = {"square": [D(0, 0, 9, 9, 0.9, color="blue"), D(20, 0, 29, 9, 0.8, color="red")]}
    assert not judge(None, two, meta).correct


@pytest.mark.parametrize(
    "rel, box_a, ok",
    [
        ("left of", (0, 20, 10, 30), True),
        ("right of", (40, 20, 50, 30), True),
        ("above", (20, 0, 30, 10), True),
        ("below", (20, 40, 30, 50), True),
        ("left of", (40, 20, 50, 30), False),
        ("above", (20, 40, 30, 50), False),
        # far diagonal: both relations hold at once (-0.61 on each axis)
        ("left of", (6, 6, 16, 16), True),
        ("above", (6, 6, 16, 16), True),
        # near diagonal: after the 0.1 shrink both components fall under 0.5 of the offset norm (-0.42)
        ("left of", (15, 15, 25, 25), False),
    ],
)
def test_relations_with_margin(rel, box_a, ok):
    meta = {
        "tag": "position",
        "include": [{"class": "circle", "count": 1}, {"class": "square", "count": 1, "position": [rel, 0]}],
    }
    objs = {"circle": [D(20, 20, 30, 30)], "square": [D(*box_a)]}
    assert judge(None, objs, meta).correct is ok


def test_relation_threshold_exact_values():
    # A centred 10 px right of B, boxes 10 wide: shrink = 0.1 * 20 = 2 -> revised dx = 8 / 10 = 0.8 > 0.5
    assert W.relative_position((10, 0, 20, 10), (0, 0, 10, 10)) == {"right of"}
    # offset (6, 5): dx = (6 - 2) / 7.81 = 0.51 > 0.5, dy = (5 - 2) / 7.81 = 0.38 -> only "right of"
    assert W.relative_position((6, 5, 16, 15), (0, 0, 10, 10)) == {"right of"}
    # offset (5, 5): dx = (5 - 2) / 7.07 = 0.42 -> nothing
    assert W.relative_position((5, 5, 15, 15), (0, 0, 10, 10)) == set()
    # overlapping centres within the margin -> empty set
    assert W.relative_position((1, 1, 11, 11), (0, 0, 10, 10)) == set()


def test_missing_target_fails_position_and_partial_is_not_double_counted():
    meta = {
        "tag": "position",
        "include": [
            {"class": "circle", "count": 1},
            {"class": "square", "count": 1, "position": ["left of", 0]},
        ],
    }
    j = judge(None, {"square": [D(0, 0, 9, 9)]}, meta)
    assert not j.correct and "no target for square to be left of" in j.reason
    assert j.partial == 0.0  # neither the circle nor the square's relation holds
    j = judge(None, {"circle": [D(0, 0, 9, 9)], "square": [D(40, 0, 49, 9)]}, meta)
    assert not j.correct and j.partial == pytest.approx(0.5)


def test_a_failed_colour_skips_the_position_and_a_target_must_be_an_earlier_clause():
    """A clause whose colour fails is not checked for position (its partial credit is the colour's count, one
    reason); a position whose target is the clause itself has no target (not an IndexError)."""
    meta = {
        "tag": "position",
        "include": [
            {"class": "circle", "count": 1},
            {"class": "square", "count": 1, "color": "red", "position": ["left of", 0]},
        ],
    }
    j = judge(None, {"circle": [D(20, 20, 30, 30)], "square": [D(0, 20, 10, 30, color="blue")]}, meta)
    assert not j.correct and j.partial == pytest.approx(0.5)
    assert j.reason == "expected red square>=1, found 0 red; and 1 blue"
    own = {"tag": "position", "include": [{"class": "square", "count": 1, "position": ["left of", 0]}]}
    j = judge(None, {"square": [D(0, 0, 9, 9)]}, own)
    assert not j.correct and j.reason == "no target for square to be left of" and j.partial == 0.0


def test_a_failed_position_gives_one_reason():
    """Two squares, both on the wrong side of the circle: the clause fails once, with the first square's reason."""
    meta = {
        "tag": "position",
        "include": [
            {"class": "circle", "count": 1},
            {"class": "square", "count": 2, "position": ["left of", 0]},
        ],
    }
    raw = {"circle": [D(20, 20, 30, 30)], "square": [D(40, 20, 50, 30, 0.9), D(40, 40, 50, 50, 0.8)]}
    j = judge(None, raw, meta)
    assert j.reason.splitlines() == ["expected square left of target, found right of target"]
    assert j.partial == pytest.approx(0.5)
    # a square on top of the circle is in no relation to it: the reason says it overlaps (mutation round 18)
    on_top = {"circle": [D(20, 20, 30, 30)], "square": [D(21, 21, 31, 31)]}
    reason = judge(
        None, on_top, {**meta, "include": [meta["include"][0], {**meta["include"][1], "count": 1}]}
    ).reason
    assert reason == "expected square left of target, found overlapping target"


def test_summary_is_mean_of_task_scores():
    rows = (
        [{"tag": "a", "correct": True}] * 3
        + [{"tag": "a", "correct": False}]
        + [{"tag": "b", "correct": False}]
    )
    overall, tasks = summarize(rows)
    assert tasks == {"a": 0.75, "b": 0.0} and overall == pytest.approx(0.375)


def test_evaluate_accepts_a_colour_classifier():
    meta = {"tag": "colors", "include": [{"class": "dog", "count": 1, "color": "brown"}]}
    j = evaluate(None, {"dog": [D(0, 0, 5, 5)]}, meta, lambda img, dets, cls: ["brown"] * len(dets))
    assert j.correct


# ---- the dense credit (geneval:mode=soft), hand-computed --------------------------------------------------------
COUNT4 = {
    "tag": "counting",
    "include": [{"class": "circle", "count": 4}],
    "exclude": [{"class": "circle", "count": 5}],
}


def test_soft_credit_equals_partial_credit_with_confident_detections():
    three = {"circle": [D(i * 12, 0, i * 12 + 10, 10) for i in range(3)]}
    six = {"circle": [D(i * 10, 0, i * 10 + 8, 8) for i in range(6)]}
    for dets in (three, six):
        assert soft_credit(None, dets, COUNT4) == pytest.approx(judge(None, dets, COUNT4).partial)
    four = {"circle": [D(i * 12, 0, i * 12 + 10, 10) for i in range(4)]}
    assert judge(None, four, COUNT4).correct and soft_credit(None, four, COUNT4) == 1.0


def test_soft_credit_ramps_confidence_colour_and_position():
    # a ragged fourth circle (score 0.45 of the counting threshold 0.9) earns half a circle: (3 + 0.5) / 4
    ragged = {"circle": [D(i * 12, 0, i * 12 + 10, 10) for i in range(3)] + [D(40, 0, 50, 10, 0.45)]}
    assert judge(None, ragged, COUNT4).partial == pytest.approx(0.75)
    assert soft_credit(None, ragged, COUNT4) == pytest.approx(0.875)
    # an image the strict rules pass scores 1 (a fifth circle below the counting threshold is filtered there)
    five = {"circle": [D(i * 12, 0, i * 12 + 10, 10) for i in range(4)] + [D(60, 0, 70, 10, 0.6)]}
    assert judge(None, five, COUNT4).correct and soft_credit(None, five, COUNT4) == 1.0
    # colour: the wrong colour earns nothing, a faint right one (0.15 of 0.3) half
    red = {"tag": "colors", "include": [{"class": "square", "count": 1, "color": "red"}]}
    assert soft_credit(None, {"square": [D(0, 0, 9, 9, color="blue")]}, red) == 0.0
    assert soft_credit(None, {"square": [D(0, 0, 9, 9, 0.15, color="red")]}, red) == pytest.approx(0.5)
    # position: the cross's revised offset from the square is (-(6 - 2), -(8 - 2)) / |(-6, -8)| = (-0.4, -0.6): "left
    # of" fails the rule (needs > 0.5) and earns 0.4 / 0.5 = 0.8 of its clause; the square's clause is met: 0.9
    left = {
        "tag": "position",
        "include": [
            {"class": "square", "count": 1},
            {"class": "cross", "count": 1, "position": ["left of", 0]},
        ],
    }
    near = {"square": [D(20, 20, 30, 30)], "cross": [D(14, 12, 24, 22)]}
    assert relation_margin((14, 12, 24, 22), (20, 20, 30, 30), "left of") == pytest.approx(0.4)
    assert not judge(None, near, left).correct
    assert judge(None, near, left).partial == pytest.approx(0.5)
    assert soft_credit(None, near, left) == pytest.approx(0.9)
    # no target: the position clause earns nothing
    assert soft_credit(None, {"cross": [D(14, 12, 24, 22)]}, left) == 0.0
    # only objects detected as the counted class count against: a square beside three circles costs nothing
    mixed = {"circle": [D(i * 12, 0, i * 12 + 10, 10) for i in range(3)], "square": [D(60, 0, 70, 10)]}
    assert soft_credit(None, mixed, COUNT4) == pytest.approx(0.75)


def test_soft_credit_counts_a_further_object_against_by_its_ramped_confidence():
    """On a counting prompt each object beyond `count` costs its weight over the threshold, as the ones counted earn:
    two circles asked, a sure one and two ragged ones at 0.45 (half of 0.9): (1 + 0.5) / 2 - 0.5 / 2 = 0.5."""
    meta = {
        "tag": "counting",
        "include": [{"class": "circle", "count": 2}],
        "exclude": [{"class": "circle", "count": 3}],
    }
    raw = {"circle": [D(0, 0, 9, 9), D(20, 0, 29, 9, 0.45), D(40, 0, 49, 9, 0.45)]}
    assert not judge(None, raw, meta).correct
    assert soft_credit(None, raw, meta) == pytest.approx(0.5)


def test_soft_credit_objects_of_no_weight_neither_serve_a_clause_nor_become_targets():
    two = {"tag": "two_object", "include": [{"class": "square", "count": 1}, {"class": "circle", "count": 1}]}
    # the circle earns nothing as a square, so it is left for the circle's clause: (0 + 1) / 2
    assert soft_credit(None, {"circle": [D(0, 0, 9, 9)]}, two) == pytest.approx(0.5)
    # a blue circle is no target for "a square left of a red circle": the square's clause earns nothing either
    meta = {
        "tag": "position",
        "include": [
            {"class": "circle", "count": 1, "color": "red"},
            {"class": "square", "count": 1, "position": ["left of", 0]},
        ],
    }
    raw = {"circle": [D(20, 20, 30, 30, color="blue")], "square": [D(0, 20, 10, 30)]}
    assert soft_credit(None, raw, meta) == 0.0


def test_soft_credit_judges_with_the_colour_function_it_is_given():
    """The strict verdict inside soft_credit uses the caller's colour classifier: two brown dogs pass (a third at
    0.6 is under the counting threshold), so the soft credit is 1, not 1 - (0.6 / 0.9) / 2."""
    meta = {
        "tag": "counting",
        "include": [{"class": "dog", "count": 2, "color": "brown"}],
        "exclude": [{"class": "dog", "count": 3}],
    }
    raw = {"dog": [D(0, 0, 9, 9, 0.95), D(20, 0, 29, 9, 0.95), D(40, 0, 49, 9, 0.6)]}
    brown = lambda img, dets, cls: ["brown"] * len(dets)  # noqa: E731
    assert judge(None, raw, meta, brown).correct and soft_credit(None, raw, meta, brown) == 1.0


def test_soft_credit_near_miss_shape_earns_half_and_objects_serve_one_clause():
    meta = {"tag": "two_object", "include": [{"class": "square", "count": 1}, {"class": "cross", "count": 1}]}
    square = Detection(box=(0, 0, 9, 9), score=0.91, class_scores={"square": 0.91, "cross": 0.0})
    # a ragged cross, detected as a circle; as a cross it scores 0.15 = half the threshold 0.3: 0.5 * 0.5
    blob = Detection(
        box=(20, 0, 29, 9), score=0.7, class_scores={"circle": 0.7, "cross": 0.15, "square": 0.6}
    )
    raw = {"square": [square], "circle": [blob]}
    assert not judge(None, raw, meta).correct and judge(None, raw, meta).partial == pytest.approx(0.5)
    assert soft_credit(None, raw, meta) == pytest.approx((1.0 + 0.25) / 2)
    # without the per-class scores the blob earns nothing as a cross
    plain = {"square": [D(0, 0, 9, 9, 0.91)], "circle": [D(20, 0, 29, 9, 0.7)]}
    assert soft_credit(None, plain, meta) == pytest.approx(0.5)
    # one object serves one clause: alone, the blob earns half a square (0.5 * 1) and leaves the cross nothing
    assert soft_credit(None, {"circle": [blob]}, meta) == pytest.approx((0.5 + 0.0) / 2)


def test_soft_credit_reads_the_colour_of_each_object_still_free():
    """A later colour clause classifies the objects earlier clauses left free, and reads each one's own colour:
    a red square (taken by clause 0) and a blue cross under the threshold (0.2 / 0.3 of a clause)."""
    meta = {
        "tag": "color_attr",
        "include": [
            {"class": "square", "count": 1, "color": "red"},
            {"class": "cross", "count": 1, "color": "blue"},
        ],
    }
    raw = {"square": [D(0, 0, 9, 9, 0.95, "red")], "cross": [D(20, 0, 29, 9, 0.2, "blue")]}
    assert not judge(None, raw, meta).correct
    assert soft_credit(None, raw, meta) == pytest.approx((1.0 + 0.2 / 0.3) / 2)


def test_an_exclude_of_null_is_no_exclude():
    """An "exclude" of null (a writer's empty field) is read as no exclude clause by the strict rules and by the soft
    credit (mutation round 18)."""
    meta = {"tag": "two_object", "include": [{"class": "square", "count": 1}, {"class": "cross", "count": 1}]}
    raw = {"square": [D(0, 0, 9, 9)]}
    for m in (meta, {**meta, "exclude": None}):
        j = judge(None, raw, m)
        assert not j.correct and j.partial == pytest.approx(0.5)
        assert soft_credit(None, raw, m) == pytest.approx(0.5)


def test_a_class_that_must_be_absent_and_is_not_included_is_its_own_clause():
    """For "a square, no cross" the exclude clause for the cross (a class no include clause names) is a clause of its
    own. Partial credit: 1 when fewer than `count` crosses survive the threshold, else 0. Soft credit: 1 - min(1,
    sum of the crosses' confidence ramps / count)."""
    meta = {
        "tag": "single_object",
        "include": [{"class": "square", "count": 1}],
        "exclude": [{"class": "cross", "count": 1}],
    }
    # square met, a cross present (0.6 >= the threshold 0.3: a full ramp): (1 + 0) / 2 both ways
    present = {"square": [D(0, 0, 9, 9)], "cross": [D(20, 0, 29, 9, 0.6)]}
    j = judge(None, present, meta)
    assert not j.correct and j.partial == pytest.approx(0.5)
    assert soft_credit(None, present, meta) == pytest.approx(0.5)
    # square missing, no cross: the absent cross earns its clause, (0 + 1) / 2
    assert judge(None, {}, meta).partial == pytest.approx(0.5)
    assert soft_credit(None, {}, meta) == pytest.approx(0.5)
    # square missing, a faint cross (0.15, half the threshold): filtered out for the partial credit, (0 + 1) / 2;
    # the soft credit counts half of it against the clause, (0 + (1 - 0.5)) / 2
    faint = {"cross": [D(20, 0, 29, 9, 0.15)]}
    assert judge(None, faint, meta).partial == pytest.approx(0.5)
    assert soft_credit(None, faint, meta) == pytest.approx(0.25)
    # square met, no cross: correct, 1 both ways
    # three crosses cost the clause all of its credit and no more: (0 + 0) / 2
    three = {"cross": [D(i * 12, 0, i * 12 + 9, 9) for i in range(3)]}
    assert soft_credit(None, three, meta) == 0.0
    ok = {"square": [D(0, 0, 9, 9)]}
    assert judge(None, ok, meta).correct and soft_credit(None, ok, meta) == 1.0
    # with two crosses allowed short of failing (count 2), one confident cross costs half the clause: the sum of
    # the ramps is over the exclude's count, (0 + (1 - 1/2)) / 2 (mutation round 18)
    two = {**meta, "exclude": [{"class": "cross", "count": 2}]}
    assert soft_credit(None, {"cross": [D(20, 0, 29, 9)]}, two) == pytest.approx(0.25)


def test_shapes_detector_reports_every_class_confidence():
    spec = W.two_object("square", "cross")
    img, _ = W.render(spec, 0)
    for cls, dets in DET(img).items():
        for d in dets:
            assert set(d.class_scores) == set(W.SHAPES) and d.class_scores[cls] == d.score
            assert max(d.class_scores.values()) == d.score


def test_soft_reward_passes_its_verdict_and_scores_as_the_function():
    """The `geneval:mode=soft` reward hands soft_credit the strict verdict it already has; the scores must equal
    the function's own (which runs the rules itself) on passing and failing renders."""
    import torch

    from imgalign.rewards import build_reward

    reward = build_reward("geneval:mode=soft")
    specs = [W.position("cross", "left of", "square"), W.counting("circle", 3), W.colors("red", "square")]
    imgs, metas = [], []
    for i, spec in enumerate(specs):
        img, _ = W.render(spec, i)
        imgs.append(img)
        metas.append(spec.to_metadata())
        # a failing pair: the same image judged against a corrupted prompt
        imgs.append(img)
        metas.append(corruptions(spec, random.Random(i))[0][1].to_metadata())
    x = torch.stack([torch.from_numpy(np.array(im)).permute(2, 0, 1).float() / 255 for im in imgs])
    out = reward.score(x, [m.get("prompt", "") for m in metas], metas)
    want = [soft_credit(im, DET(im), m) for im, m in zip(imgs, metas)]
    assert out.scores.tolist() == pytest.approx(want)
    assert any(w == 1.0 for w in want) and any(w < 1.0 for w in want)


def test_strict_reward_gives_no_partial_credit():
    """A two-object prompt rendered with only one of its objects: one clause of two is met, so `geneval:mode=
    partial` gives 1/2 and `geneval:mode=strict` (the 0/1 verdict `imgalign eval` reports) gives 0; the full
    render gets 1 from both."""
    import torch

    from imgalign.rewards import build_reward

    meta = W.two_object("square", "cross").to_metadata()
    half, _ = W.render(W.single_object("square"), 0)
    full, _ = W.render(W.two_object("square", "cross"), 0)
    x = torch.stack([torch.from_numpy(np.array(im)).permute(2, 0, 1).float() / 255 for im in (half, full)])
    prompts, metas = [meta["prompt"]] * 2, [meta, meta]
    assert build_reward("geneval:mode=partial").score(x, prompts, metas).scores.tolist() == [0.5, 1.0]
    strict = build_reward("geneval:mode=strict").score(x, prompts, metas)
    assert strict.scores.tolist() == [0.0, 1.0] and [d["partial"] for d in strict.details] == [0.5, 1.0]


def test_the_reward_hands_the_judge_its_colour_classifier_and_its_verdict():
    """The reward judges with its colour classifier where it has one, and mode=soft scores 1 for an image the
    strict rules pass (a fifth circle at 0.6 is under the counting threshold), not 1 - (0.6 / 0.9) / 4."""
    import torch

    from imgalign.rewards.geneval import GenEvalReward

    x = torch.zeros(1, 3, 64, 64)
    soft = GenEvalReward(mode="soft")
    soft.detector = lambda img: {
        "circle": [D(i * 12, 0, i * 12 + 10, 10) for i in range(4)] + [D(50, 0, 60, 10, 0.6)]
    }
    assert soft.score(x, [""], [COUNT4]).scores.tolist() == [1.0]
    partial = GenEvalReward(mode="partial")
    partial.detector = lambda img: {"square": [D(0, 0, 9, 9, color="blue")]}
    partial.color = lambda img, dets, cls: ["red"] * len(dets)
    red = {"tag": "colors", "include": [{"class": "square", "count": 1, "color": "red"}]}
    assert partial.score(x, [""], [red]).scores.tolist() == [1.0]


def test_shapes_detector_is_resolution_independent():
    """A 2x render is judged as the native one: same classes, colours and scores, boxes scaled by 2; a 3 x 3
    px speck (9 px < min_area 12) stays noise at 2x (36 px, under the scaled 48)."""
    objs = [
        W.PlacedObject("square", "red", (10, 10, 30, 30), 0),
        W.PlacedObject("circle", "green", (34, 8, 56, 30), 1),
        W.PlacedObject("square", "blue", (44, 44, 47, 47), 2),
    ]
    native, double = DET(W.draw_objects(objs, 64)), DET(W.draw_objects(objs, 128))
    expected = {"square": [("red", (10, 10, 30, 30))], "circle": [("green", (34, 8, 56, 30))]}
    for dets, f in ((native, 1), (double, 2)):
        got = {c: [(d.color, tuple(v / f for v in d.box)) for d in ds] for c, ds in dets.items()}
        assert got == expected and all(d.score == 1.0 for ds in dets.values() for d in ds)


def test_shapes_detector_keeps_a_component_of_exactly_min_area_and_reads_rgba():
    """A 3 x 4 px square (12 px = min_area) is an object, at 2x too (48 px = the scaled min_area); an RGBA image is
    read as its RGB."""
    objs = [W.PlacedObject("square", "blue", (44, 44, 47, 48), 0)]
    for size, f in ((64, 1), (128, 2)):
        img = W.draw_objects(objs, size)
        for im in (img, img.convert("RGBA")):
            (sq,) = DET(im)["square"]
            assert sq.color == "blue" and tuple(v / f for v in sq.box) == (44, 44, 47, 48)


def test_shapes_detector_soft_iou_counts_the_anti_aliased_rim():
    """The soft IoU takes the component's alpha over its whole box, the faint (alpha <= 0.5) rim included: an
    anti-aliased disc against the full square template has IoU ~ pi / 4 (its area share), so the square
    confidence is (pi / 4 - 0.5) / 0.4 = 0.7135; dropping the rim lowers it by 0.025 (128 px) to 0.048
    (64 px)."""
    objs = [W.PlacedObject("circle", "green", (34, 8, 56, 30), 0)]
    for size in (64, 128):
        (circle,) = DET(W.draw_objects(objs, size))["circle"]
        assert circle.class_scores["square"] == pytest.approx((np.pi / 4 - 0.5) / 0.4, abs=0.01)


def test_unmix_gives_each_palette_colour_full_alpha_and_clips_brighter_pixels_to_one():
    from imgalign.eval.shapes_detector import unmix

    pal = np.array([[*W.COLORS.values(), W.BACKGROUND]], dtype=np.uint8)  # (1, K + 1, 3)
    k, alpha = unmix(pal)
    assert k[0, :-1].tolist() == list(range(len(W.COLORS)))
    assert alpha[0, :-1].tolist() == [1.0] * len(W.COLORS) and alpha[0, -1] == 0.0
    # a pixel past a palette colour (further from the background) is that colour at alpha 1, not above
    k, alpha = unmix(np.full((1, 1, 3), 255, dtype=np.uint8))
    assert alpha.max() == 1.0
    # a blend b + t (c - b) keeps its colour c and alpha t (not the palette colour nearest in RGB); a pixel darker
    # than the background has alpha 0, not below
    bg, pal = np.array(W.BACKGROUND, dtype=float), np.array(list(W.COLORS.values()), dtype=float)
    for t in (0.3, 0.6):
        k, alpha = unmix(np.round(bg + t * (pal - bg)).astype(np.uint8)[None])
        assert k[0].tolist() == list(range(len(W.COLORS)))
        assert alpha[0] == pytest.approx([t] * len(W.COLORS), abs=0.01)
    _, alpha = unmix(np.zeros((1, 1, 3), dtype=np.uint8))
    assert alpha.min() == 0.0


def test_soft_credit_reads_at_most_16_objects_per_class_as_the_strict_rules_do():
    """GenEval keeps the 16 most confident detections of a class; the soft credit reads the same 16, so a faint red
    circle ranked 17th behind 16 blue ones earns nothing (it would earn 0.2 / 0.3 of its clause as the 16th)."""
    red = {"tag": "colors", "include": [{"class": "circle", "count": 1, "color": "red"}]}
    faint = D(0, 50, 9, 59, 0.2, color="red")
    for n_blue, want in ((15, 0.2 / 0.3), (16, 0.0)):
        blue = [D(i * 4, 0, i * 4 + 3, 3, 0.95, color="blue") for i in range(n_blue)]
        raw = {"circle": blue + [faint]}
        assert not judge(None, raw, red).correct
        assert soft_credit(None, raw, red) == pytest.approx(want)


def test_shapes_detector_soft_iou_leaves_out_another_colours_pixels_in_the_box():
    """A blue square in a corner of a red circle's box (outside the disc) changes none of the circle's class
    confidences: only the circle's own colour, its component and its faint rim, enters its soft IoU."""
    circle = W.PlacedObject("circle", "red", (10, 10, 50, 50), 0)
    (alone,) = DET(W.draw_objects([circle]))["circle"]
    dets = DET(W.draw_objects([circle, W.PlacedObject("square", "blue", (10, 10, 14, 14), 1)]))
    (beside,) = dets["circle"]
    assert [d.color for d in dets["square"]] == ["blue"]
    assert beside.class_scores == pytest.approx(alone.class_scores, abs=1e-6)


def _red_pixels(*cells: tuple[slice, slice] | tuple[int, int]) -> np.ndarray:
    """A 64 x 64 shapes-world background with the given cells (slices or single pixels) in pure red."""
    rgb = np.tile(np.array(W.BACKGROUND, dtype=np.uint8), (64, 64, 1))
    for cell in cells:
        rgb[cell] = W.COLORS["red"]
    return rgb


def test_shapes_detector_joins_pixels_that_touch_only_at_a_corner():
    """Components are 8-connected: two red squares meeting corner to corner are one object over both boxes (with
    4-connectivity they were two whole squares)."""
    dets = DET(_red_pixels((slice(10, 20), slice(10, 20)), (slice(20, 30), slice(20, 30))))
    (one,) = [d for ds in dets.values() for d in ds]
    assert one.color == "red" and one.box == (10.0, 10.0, 30.0, 30.0)


def test_shapes_detector_min_area_counts_the_components_own_pixels_not_its_neighbours_in_its_box():
    """A 10-pixel diagonal speck (under min_area 12) whose box takes in 10 pixels of a red square beside it (not
    touching it) stays noise: the area is that of its own component."""
    speck = [
        (r, 62 - r) for r in range(25, 35)
    ]  # rows 25-34, columns 37-28: its box holds the square's corner
    dets = DET(_red_pixels((slice(10, 30), slice(10, 30)), *speck))
    assert [(c, d.color, d.box) for c, ds in dets.items() for d in ds] == [
        ("square", "red", (10.0, 10.0, 30.0, 30.0))
    ]


def test_shapes_detector_foreground_is_alpha_above_one_half_by_default():
    """A pixel is foreground when its blend toward a palette colour is above 0.5: a uniform square at 0.45 of the
    way from the background to red is not an object, one at 0.55 is (a red square of confidence (0.55 - 0.5) /
    0.4, its soft IoU being its alpha)."""
    bg, red = np.array(W.BACKGROUND, dtype=float), np.array(W.COLORS["red"], dtype=float)
    found = {}
    for t in (0.45, 0.55):
        rgb = np.tile(bg, (64, 64, 1))
        rgb[20:40, 20:40] = bg + t * (red - bg)
        found[t] = DET(np.round(rgb).astype(np.uint8))
    assert found[0.45] == {}
    (sq,) = found[0.55]["square"]
    assert sq.color == "red" and sq.box == (20, 20, 40, 40)
    assert sq.score == pytest.approx((0.55 - 0.5) / 0.4, abs=0.03)

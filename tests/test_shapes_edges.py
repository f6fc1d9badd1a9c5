"""Edges of the shapes world, its detector and the eval-suite loader that the broader tests leave open
(mutation round 11b)."""

import numpy as np
import pytest

from imgalign import shapes as W
from imgalign.eval.shapes_detector import ShapesDetector


def _raises(meta: dict, message: str) -> None:
    with pytest.raises(W.SpecError, match=message):
        W.Spec.from_metadata(meta)


def test_a_clause_of_five_objects_names_its_count_not_the_image_total():
    _raises(
        {"tag": "counting", "include": [{"class": "circle", "count": 5}]},
        r"include\[0\]\.count must be between 1 and 4, got 5",
    )


def test_a_negative_position_target_is_refused():
    """Index -1 would name no clause the layout can find: the relation would silently constrain nothing."""
    _raises(
        {"tag": "position", "include": [{"class": "circle"}, {"class": "square", "position": ["above", -1]}]},
        r"include\[1\]\.position target -1 must name an earlier clause",
    )


def test_an_exclude_count_must_be_a_true_integer():
    for bad in ("3", 2.5):
        _raises(
            {
                "tag": "counting",
                "include": [{"class": "circle", "count": 2}],
                "exclude": [{"class": "circle", "count": bad}],
            },
            r"exclude\[0\]\.count must be a positive integer",
        )


def test_an_exclude_count_equal_to_the_included_count_is_refused():
    """GenEval fails an image with `count` or more of the class: exclude 2 with include 2 fails every image."""
    _raises(
        {
            "tag": "counting",
            "include": [{"class": "circle", "count": 2}],
            "exclude": [{"class": "circle", "count": 2}],
        },
        r"exclude\[0\]: 2 or more circles fail the image, but include asks for 2",
    )


def test_each_axis_is_shrunk_by_the_boxes_sizes_on_that_axis():
    """Detector boxes are not square: A (10 x 10) left of and below B (40 wide, 10 tall). Offset (-35, 20); the
    x axis shrinks by 0.1 x 50 = 5, the y axis by 0.1 x 20 = 2: (-30, 18) / sqrt(35^2 + 20^2)."""
    a, b = (0, 20, 10, 30), (20, 0, 60, 10)
    norm = (35**2 + 20**2) ** 0.5
    assert W.relation_margin(a, b, "left of") == pytest.approx(30 / norm)
    assert W.relation_margin(a, b, "below") == pytest.approx(18 / norm)
    assert W.relative_position(a, b) == {"left of"}


def test_a_relation_needs_a_component_strictly_beyond_one_half():
    """Offset 4 px, boxes 10 wide: (4 - 2) / 4 is exactly 0.5, which GenEval does not count."""
    a, b = (4, 0, 14, 10), (0, 0, 10, 10)
    assert W.relation_margin(a, b, "right of") == 0.5
    assert W.relative_position(a, b) == set()


def test_a_small_revised_offset_still_gives_a_dense_margin():
    """Only an offset that the shrink cancels completely gives a zero margin; a twentieth of a pixel left over
    counts (0.05 / 2.05)."""
    a, b = (2.05, 0, 12.05, 10), (0, 0, 10, 10)
    assert W.relation_margin(a, b, "right of") == pytest.approx(0.05 / 2.05)
    assert W.relation_margin((2, 0, 12, 10), b, "right of") == 0.0


def test_an_uncoloured_clause_is_drawn_in_every_palette_colour():
    """Prompts that name no colour show every colour, held-out pairs included (the generalisation contract)."""
    seen = {W.render(W.single_object("triangle"), seed)[1][0].color for seed in range(60)}
    assert seen == set(W.COLORS)


def test_a_position_clause_holds_against_every_object_of_its_target_clause():
    spec = W.Spec("position", (W.Clause("circle", count=2), W.Clause("square", position=("left of", 0))))
    for seed in range(30):
        _, objs = W.render(spec, seed)
        (mover,) = [o for o in objs if o.clause == 1]
        for target in (o for o in objs if o.clause == 0):
            assert "left of" in W.relative_position(mover.box, target.box), (seed, mover.box, target.box)


def test_shapes_detector_foreground_needs_alpha_strictly_above_one_half():
    """Grey 132 is exactly halfway from the background (24) to white (240): alpha 0.5 is not foreground."""
    det = ShapesDetector()
    for level, want in ((132, {}), (133, {"square"})):
        rgb = np.full((64, 64, 3), W.BACKGROUND[0], dtype=np.uint8)
        rgb[20:30, 20:30] = level
        assert set(det(rgb)) == set(want), level


def test_a_boolean_exclude_count_is_refused_as_a_boolean_include_count_is():
    """JSON `true` is a Python int: it was read as an exclude count of 1."""
    _raises(
        {
            "tag": "counting",
            "include": [{"class": "circle", "count": 2}],
            "exclude": [{"class": "square", "count": True}],
        },
        r"exclude\[0\]\.count must be a positive integer, got True",
    )


# ---- eval/suite.py -------------------------------------------------------------------------------------------
def test_image_digest_ignores_metadata_key_order_and_is_empty_for_an_unreadable_file(tmp_path):
    """A metadata line rewritten with its keys in another order is the same prompt (the verdict is reused); a file
    that cannot be read has no digest (judged again next time)."""
    from imgalign.eval.suite import image_digest

    png = tmp_path / "0000.png"
    png.write_bytes(b"not really a png")
    a = image_digest(png, {"tag": "single_object", "include": [{"class": "circle"}]})
    b = image_digest(png, {"include": [{"class": "circle"}], "tag": "single_object"})
    assert a == b and len(a) == 64
    assert image_digest(tmp_path / "missing.png", {"tag": "single_object"}) == ""


def test_boxes_are_clear_from_a_gap_of_three_pixels_on_either_side_of_either_axis():
    """Two boxes on one row (or one column) are clear of each other once MIN_GAP pixels lie between them, whichever
    comes first; one pixel less and they are not (mutation round 18: a one-sided check refused every layout with
    an object beside another)."""
    box = (20, 20, 30, 30)  # 10 px wide
    for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1)):
        clear = tuple(v + d * (10 + W.MIN_GAP) for v, d in zip(box, (dx, dy, dx, dy)))
        near = tuple(v + d * (10 + W.MIN_GAP - 1) for v, d in zip(box, (dx, dy, dx, dy)))
        assert W._boxes_clear(box, [clear]), clear
        assert not W._boxes_clear(box, [near]), near


def test_a_shape_outside_the_vocabulary_is_refused_not_drawn_as_a_circle():
    """shape_polygon and shape_mask name an unknown shape instead of falling through to the circle's ellipse
    (mutation round 18)."""
    with pytest.raises(W.SpecError, match="unknown shape 'star'"):
        W.shape_mask("star", 8, 8)


def test_objects_drawn_at_a_larger_size_keep_anti_aliased_edges():
    """draw_objects(size=256) super-samples at 4x the size asked for, as at 64: a circle's rim has pixels between
    the background and its colour (mutation round 18: drawn at 4x 64 and resized, it had none)."""
    circle = W.PlacedObject("circle", "white", (10, 10, 30, 30), 0)
    for size in (64, 256):
        grey = np.asarray(W.draw_objects([circle], size=size))[..., 0]
        assert grey.shape == (size, size)
        assert ((grey > W.BACKGROUND[0]) & (grey < W.COLORS["white"][0])).sum() >= size // 2, size


def test_a_colour_that_is_not_a_string_and_a_boolean_target_index_are_refused_by_name():
    """Spec.from_metadata raises SpecError naming the field: a list as the colour was a bare "unhashable type"
    TypeError, and `true` as a position's target index was read as clause 1 (mutation round 18)."""
    _raises({"tag": "colors", "include": [{"class": "circle", "color": ["red"]}]}, r"include\[0\]\.color")
    three = [{"class": "circle"}, {"class": "square"}, {"class": "cross", "position": ["left of", True]}]
    _raises(
        {"tag": "position", "include": three}, r"include\[2\]\.position must be \[relation, target index\]"
    )


def test_objects_drawn_below_size_16_stay_in_the_image_and_a_size_below_1_is_refused():
    """The super-sampling factor was SUPERSAMPLE * size // 64, 0 below size 16: a 0 x 0 canvas, so a red square
    filling the image came out as a blank background; it is now drawn at 64 px and box-filtered down."""
    objs = [W.PlacedObject("square", "red", (0, 0, 64, 64), 0)]
    for size in (8, 15):
        px = np.asarray(W.draw_objects(objs, size))
        assert px.shape == (size, size, 3) and (px == W.COLORS["red"]).all()
    with pytest.raises(ValueError, match=r"at least 1 pixel \(got 0\)"):
        W.draw_objects(objs, 0)


def test_render_tensor_of_no_specs_is_refused_by_name():
    with pytest.raises(ValueError, match="render_tensor needs at least one Spec"):
        W.render_tensor([])

import json
import random

import numpy as np
import pytest

from imgalign import shapes as W
from imgalign.prompts import shapes as P
from imgalign.prompts.io import PromptFileError, load_geneval_metadata, load_prompts
from tests.conftest import SHARED


def test_prompts_follow_geneval_phrasing():
    assert W.single_object("circle").prompt() == "a photo of a circle"
    assert W.counting("cross", 3).prompt() == "a photo of three crosses"
    assert W.colors("red", "square").prompt() == "a photo of a red square"
    assert W.position("triangle", "left of", "square").prompt() == "a photo of a triangle left of a square"
    assert (
        W.color_attr("blue", "square", "yellow", "cross").prompt()
        == "a photo of a blue square and a yellow cross"
    )
    assert (
        W.two_object("circle", "star" if "star" in W.SHAPES else "cross")
        .prompt()
        .startswith("a photo of a circle and")
    )


def test_metadata_round_trip_matches_official_schema():
    spec = W.position("triangle", "below", "circle")
    meta = spec.to_metadata()
    assert meta == {
        "tag": "position",
        "include": [
            {"class": "circle", "count": 1},
            {"class": "triangle", "count": 1, "position": ["below", 0]},
        ],
        "prompt": "a photo of a triangle below a circle",
    }
    assert W.Spec.from_metadata(meta) == spec
    assert W.counting("square", 3).n_objects == 3 and W.two_object("circle", "cross").n_objects == 2
    c = W.counting("square", 2).to_metadata()
    assert c["exclude"] == [{"class": "square", "count": 3}]


@pytest.mark.parametrize(
    "meta, field",
    [
        ({"tag": "single_object", "include": [{"class": "hexagon", "count": 1}]}, "include[0].class"),
        (
            {"tag": "colors", "include": [{"class": "circle", "count": 1, "color": "teal"}]},
            "include[0].color",
        ),
        (
            {
                "tag": "position",
                "include": [{"class": "circle"}, {"class": "square", "position": ["near", 0]}],
            },
            "include[1].position",
        ),
        ({"tag": "dancing", "include": [{"class": "circle"}]}, "unknown tag"),
        ({"tag": "counting", "include": [{"class": "circle", "count": 9}]}, "include[0].count"),
        ({"include": [{"class": "circle"}]}, "'tag' is missing"),
        ({"tag": "single_object", "include": []}, "'include' must be a non-empty list"),
        (
            {
                "tag": "position",
                "include": [{"class": "circle"}, {"class": "square", "position": ["above", 0, 1]}],
            },
            "include[1].position must be [relation, target index]",
        ),
        (
            {
                "tag": "position",
                "include": [{"class": "circle"}, {"class": "square", "position": ["above", 1]}],
            },
            "include[1].position target 1 must name an earlier clause",
        ),
        ({"tag": "single_object", "include": [{"class": "circle", "count": True}]}, "include[0].count"),
        ({"tag": "single_object", "include": [{"class": "circle", "count": 0}]}, "include[0].count"),
        ({"tag": "colors", "include": [{"class": "circle", "color": ""}]}, "include[0].color"),
        (
            {
                "tag": "counting",
                "include": [{"class": "circle", "count": 2}],
                "exclude": [{"class": "circle"}],
            },
            "exclude[0] must be an object with 'class' and 'count'",
        ),
        (
            {
                "tag": "counting",
                "include": [{"class": "circle", "count": 2}],
                "exclude": [{"class": "square", "count": 0}],
            },
            "exclude[0].count must be a positive integer",
        ),
        (
            {
                "tag": "counting",
                "include": [{"class": "circle", "count": 2}],
                "exclude": [{"class": "star", "count": 3}],
            },
            "exclude[0].class: unknown shape 'star'",
        ),
        (
            {"tag": "single_object", "include": [{"count": 1}]},
            "include[0] must be an object with a 'class' field",
        ),
        (
            {
                "tag": "position",
                "include": [{"class": "circle"}, {"class": "square", "position": ["above", "0"]}],
            },
            "include[1].position must be [relation, target index]",
        ),
        ([{"tag": "single_object"}], "metadata must be a JSON object, got list"),
    ],
)
def test_bad_specs_name_the_field(meta, field):
    with pytest.raises(W.SpecError, match=field.replace("[", r"\[").replace("]", r"\]")):
        W.Spec.from_metadata(meta)


def test_render_is_seeded_and_layout_satisfies_clauses():
    spec = W.position("cross", "above", "circle")
    a, objs = W.render(spec, 7)
    b, _ = W.render(spec, 7)
    assert np.array_equal(np.asarray(a), np.asarray(b))
    assert a.size == (W.IMAGE_SIZE, W.IMAGE_SIZE)
    target = next(o for o in objs if o.clause == 0)
    mover = next(o for o in objs if o.clause == 1)
    assert "above" in W.relative_position(mover.box, target.box)
    for i, o in enumerate(objs):  # never touching
        for p in objs[i + 1 :]:
            assert not (
                o.box[0] < p.box[2] and p.box[0] < o.box[2] and o.box[1] < p.box[3] and p.box[1] < o.box[3]
            )


def test_render_tensor_contract():
    x = W.render_tensor([W.single_object("square"), W.counting("circle", 4)], seed=1)
    import torch

    assert x.shape == (2, 3, 64, 64) and x.dtype == torch.float32
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    # one generator walks the batch: the same spec twice gets two layouts, the ones render draws in turn
    spec = W.counting("circle", 4)
    x = W.render_tensor([spec, spec], seed=1)
    assert not torch.equal(x[0], x[1])
    rng = random.Random(1)
    for i in range(2):
        want = torch.from_numpy(np.asarray(W.render(spec, rng)[0], dtype=np.float32) / 255.0).permute(2, 0, 1)
        assert torch.equal(x[i], want)


def test_layout_keeps_sizes_a_border_and_a_gap_between_objects():
    """Boxes are 15-22 px, one pixel clear of the canvas edge, and 3 px apart on some axis (the detector's
    components never merge)."""
    for seed in range(40):
        _, objs = W.render(W.two_object("cross", "circle") if seed % 2 else W.counting("square", 4), seed)
        for i, o in enumerate(objs):
            x0, y0, x1, y1 = o.box
            assert 15 <= x1 - x0 <= 22 and y1 - y0 == x1 - x0
            assert x0 >= 1 and y0 >= 1 and x1 <= 63 and y1 <= 63
            for p in objs[i + 1 :]:
                gap_x = max(p.box[0] - x1, x0 - p.box[2])
                gap_y = max(p.box[1] - y1, y0 - p.box[3])
                assert max(gap_x, gap_y) >= 3, (seed, o.box, p.box)
    # the sizes span the whole range (mutation round 18: every object drawn at the smallest size passed)
    sizes = {o.box[2] - o.box[0] for seed in range(40) for o in W.render(W.counting("square", 4), seed)[1]}
    assert sizes == set(range(W.MIN_SIZE, W.MAX_SIZE + 1))


def test_palette_distance_is_euclidean_to_each_colour_then_the_background():
    d = W.palette_distance(np.array([[0, 0, 0], [220, 30, 30]], dtype=np.uint8))
    assert d.shape == (2, 7)
    assert d[0, 0] == pytest.approx((220**2 + 30**2 + 30**2) ** 0.5)  # black to red
    assert d[0, 6] == pytest.approx(24 * 3**0.5)  # black to the background
    assert d[1, 0] == 0.0 and d[1, 5] == pytest.approx((20**2 + 210**2 + 210**2) ** 0.5)  # red to white


@pytest.mark.parametrize("shape", W.SHAPES)
def test_shape_mask_is_the_shape_as_the_renderer_draws_it(shape):
    """A white object on the background: its pixels are background + mask x (white - background)."""
    box = (10, 12, 31, 30)  # 21 x 18, not square, so a swapped width and height shows
    img = np.asarray(W.draw_objects([W.PlacedObject(shape, "white", box, 0)]), dtype=np.float32)
    drawn = (img[box[1] : box[3], box[0] : box[2], 0] - W.BACKGROUND[0]) / (240 - W.BACKGROUND[0])
    m = W.shape_mask(shape, box[2] - box[0], box[3] - box[1])
    assert m.shape == (18, 21)
    np.testing.assert_allclose(m, drawn, atol=1.5 / 216)


def test_eval_set_has_all_tasks_and_held_out_pairs():
    metas = load_geneval_metadata(P.EVAL_SET_PATH)
    tags = [m["tag"] for m in metas]
    for t in W.TASKS:
        assert tags.count(t) >= 50
    # the committed file is exactly what the generator builds
    assert metas == [s.to_metadata() for s in P.build_eval_set()]
    held = [m for m in metas if any((c.get("color"), c["class"]) in W.HELD_OUT_PAIRS for c in m["include"])]
    assert len(held) >= 30


def test_the_eval_set_seed_sets_the_draw():
    """build_eval_set's seed chooses the prompts: the same seed builds the same set, another seed another set
    (mutation round 18)."""
    assert P.build_eval_set(per_task=6, seed=7) == P.build_eval_set(per_task=6, seed=7)
    assert P.build_eval_set(per_task=6, seed=7) != P.build_eval_set(per_task=6)


def test_training_prompts_exclude_held_out_colour_pairs():
    specs = P.sample_training_specs(3000, seed=0)
    assert {s.tag for s in specs} == set(W.TASKS)
    for s in specs:
        for c in s.include:
            assert c.color is None or (c.color, c.shape) not in W.HELD_OUT_PAIRS
    assert P.sample_training_specs(50, seed=3) == P.sample_training_specs(50, seed=3)


def test_training_tasks_may_be_one_name_and_an_empty_selection_is_refused():
    """A single string was iterated letter by letter ("unknown task 'c'"); an empty selection was an IndexError."""
    specs = P.sample_training_specs(20, seed=1, tasks="counting")
    assert {s.tag for s in specs} == {"counting"}
    assert specs == P.sample_training_specs(20, seed=1, tasks=["counting"])
    with pytest.raises(ValueError, match="no tasks given; name at least one of single_object"):
        P.sample_training_specs(5, tasks=())


def test_official_geneval_metadata_parses():
    path = SHARED / "data" / "geneval" / "evaluation_metadata.jsonl"
    if not path.exists():
        pytest.skip("official GenEval metadata not present beside the checkout")
    metas = load_geneval_metadata(path)
    assert len(metas) == 553
    counts = {t: sum(m["tag"] == t for m in metas) for t in W.TASKS}
    assert counts == {
        "single_object": 80,
        "two_object": 99,
        "counting": 80,
        "colors": 94,
        "position": 100,
        "color_attr": 100,
    }


def test_metadata_loader_names_line_and_field(tmp_path):
    p = tmp_path / "m.jsonl"
    good = json.dumps(W.single_object("circle").to_metadata())
    p.write_text(good + "\n{not json\n")
    with pytest.raises(PromptFileError, match=r"m.jsonl:2: not valid JSON"):
        load_geneval_metadata(p)
    p.write_text(
        good + "\n" + json.dumps({"tag": "colors", "include": [{"class": "circle", "count": 1}]}) + "\n"
    )
    with pytest.raises(PromptFileError, match=r"m.jsonl:2: field 'prompt' is missing"):
        load_geneval_metadata(p)
    with pytest.raises(PromptFileError, match="does not exist"):
        load_geneval_metadata(tmp_path / "nope.jsonl")


def test_load_prompts_txt_and_jsonl(tmp_path):
    t = tmp_path / "p.txt"
    t.write_text("a photo of a circle\n\n a photo of two squares \n")
    assert [r.prompt for r in load_prompts(t)] == ["a photo of a circle", "a photo of two squares"]
    j = tmp_path / "p.jsonl"
    j.write_text(json.dumps({"prompt": "x", "style": 1}) + "\n")
    assert load_prompts(j)[0].metadata == {"prompt": "x", "style": 1}
    j.write_text(json.dumps({"text": "x"}) + "\n")
    with pytest.raises(PromptFileError, match="p.jsonl:1"):
        load_prompts(j)


def test_layout_randomness_covers_canvas():
    rng = random.Random(0)
    xs = [W.layout(W.single_object("circle"), rng)[0].box[0] for _ in range(200)]
    assert min(xs) < 10 and max(xs) > 35


def test_a_spec_no_image_can_pass_is_refused():
    """include 3 circles with exclude 'circle, count 2' (2 or more fail): the judge fails even the exact render."""
    from imgalign import shapes as W

    meta = W.counting("circle", 3).to_metadata()
    meta["exclude"] = [{"class": "circle", "count": 2}]
    with pytest.raises(
        W.SpecError, match=r"exclude\[0\]: 2 or more circles fail the image, but include asks for 3"
    ):
        W.Spec.from_metadata(meta)
    meta["exclude"] = [{"class": "circle", "count": 4}]  # the counting task's own exclude
    W.Spec.from_metadata(meta)
    meta["exclude"] = [{"class": "square", "count": 1}]  # no square is asked for: one square already fails
    W.Spec.from_metadata(meta)


def test_each_colour_has_its_named_hue():
    """The colour names are what prompts say and the detector reads: each RGB must look like its name."""
    margin = 80
    r, g, b = W.COLORS["red"]
    assert r - max(g, b) > margin
    r, g, b = W.COLORS["green"]
    assert g - max(r, b) > margin
    r, g, b = W.COLORS["blue"]
    assert b - max(r, g) > margin
    r, g, b = W.COLORS["yellow"]
    assert min(r, g) - b > margin and abs(r - g) < 40
    r, g, b = W.COLORS["purple"]
    assert min(r, b) - g > margin
    assert min(W.COLORS["white"]) > 200
    assert set(W.COLORS) == {"red", "yellow", "green", "blue", "purple", "white"}


def test_a_triangle_is_drawn_apex_up():
    img = W.draw_objects([W.PlacedObject("triangle", "red", (10, 10, 40, 40), 0)])
    red = np.all(np.asarray(img) == W.COLORS["red"], axis=-1)[10:40, 10:40]  # (rows, cols) fully red
    widths = red.sum(axis=1)
    assert widths[:5].sum() * 3 < widths[-5:].sum()  # narrow at the top, wide at the bottom
    assert widths[-3] >= 26


def test_a_spec_with_more_than_four_objects_is_refused():
    with pytest.raises(W.SpecError, match="at most 4 objects"):
        W.validate_spec(W.Spec("two_object", (W.Clause("circle", count=3), W.Clause("square", count=2))))
    W.validate_spec(W.Spec("two_object", (W.Clause("circle", count=2), W.Clause("square", count=2))))


def test_a_cross_has_arms_one_third_of_its_box_wide():
    m = W.shape_mask("cross", 30, 30)  # (h, w) in [0, 1]
    assert m.mean() == pytest.approx(5 / 9, abs=0.02)  # a plus of 1/3-wide arms covers 5 of 9 cells
    filled = m > 0.5
    assert filled[1].nonzero()[0].tolist() == list(range(10, 20))  # the top arm spans the middle third
    assert filled[:, 1].nonzero()[0].tolist() == list(range(10, 20))  # the left arm likewise
    assert not filled[:9, :9].any() and not filled[21:, 21:].any()  # the corner cells are empty


def test_relations_hold_beyond_half_and_layout_keeps_a_one_pixel_margin():
    target = (20, 20, 30, 30)
    # offset (6, 7), summed sizes 20 per axis: components (6 - 2, 7 - 2) / sqrt(85) = (0.434, 0.542)
    box = (26, 27, 36, 37)
    assert W.relation_margin(box, target, "right of") == pytest.approx(4 / 85**0.5)
    assert W.relation_margin(box, target, "below") == pytest.approx(5 / 85**0.5)
    assert W.relative_position(box, target) == {"below"}  # 0.434 is not beyond 0.5; 0.542 is
    # offset (7, 7): both components (7 - 2) / sqrt(98) = 0.505 hold, but a box one pixel larger on each side
    # (summed sizes 22: (7 - 2.2) / sqrt(98) = 0.485) would not, so layout does not place it there
    box = (27, 27, 37, 37)
    assert W.relative_position(box, target) == {"right of", "below"}
    assert not W._clear_relation(box, target, "right of")
    assert W._clear_relation((30, 27, 40, 37), target, "right of")  # (10 - 2.2) / sqrt(149) = 0.64 when grown


def test_each_task_lists_its_distinct_specs_and_the_splits_partition_them():
    """Hand counts over 4 shapes, 6 colours, 4 relations and the held-out pairs (circle, square and triangle lose
    one colour each, cross two): color_attr keeps (sum of allowed colours)^2 - sum of squares = 19^2 - 91 = 270 of
    its 12 * 36 = 432 ordered specs."""
    counts = {
        "single_object": (4, 0),
        "two_object": (4 * 3, 0),
        "counting": (4 * 3, 0),
        "colors": (24 - 5, 5),
        "position": (4 * 3 * 4, 0),
        "color_attr": (270, 432 - 270),
    }
    for task, (n_train, n_held) in counts.items():
        train, held, every = (P.all_specs(task, split) for split in ("train", "heldout", "all"))
        assert (len(train), len(held)) == (n_train, n_held), task
        assert len(set(every)) == len(every) == n_train + n_held and set(train) | set(held) == set(every), (
            task
        )
    assert {s.include[0].count for s in P.all_specs("counting", "all")} == {2, 3, 4}
    assert P.all_specs("colors") == P.all_specs("colors", "train")  # the default split is the training one
    held = P.all_specs("color_attr", "heldout")
    assert any(
        s.include[0].color == "white" and (s.include[1].color, s.include[1].shape) in W.HELD_OUT_PAIRS
        for s in held
    )
    with pytest.raises(ValueError, match="unknown split 'test'; valid: train, heldout, all"):
        P.all_specs("colors", "test")
    with pytest.raises(ValueError, match="unknown task 'colour'"):
        P.all_specs("colour")


def test_training_tasks_are_drawn_uniformly_and_the_seed_sets_the_draw():
    """Tasks first, uniformly, then a spec within the task: single_object has 4 of the 365 training specs, so a draw
    over all specs would give it ~1% of the prompts instead of ~1/6."""
    specs = P.sample_training_specs(1200, seed=0)
    share = sum(s.tag == "single_object" for s in specs) / len(specs)
    assert 0.12 < share < 0.21
    assert len(specs) == 1200
    assert P.sample_training_specs(50, seed=3) != P.sample_training_specs(50, seed=4)


def test_write_eval_set_writes_the_committed_file(tmp_path):
    out = tmp_path / "eval.jsonl"
    P.write_eval_set(out)
    assert out.read_text() == P.EVAL_SET_PATH.read_text()


def test_a_null_exclude_parses_as_none():
    """`"exclude": null` (as a JSON writer may emit for a spec with no exclude) is no exclude clause."""
    spec = W.Spec.from_metadata({"tag": "single_object", "include": [{"class": "circle"}], "exclude": None})
    assert spec.exclude == () and spec == W.single_object("circle")

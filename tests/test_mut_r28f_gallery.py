"""eval/gallery.py (mutation round 28f): a labelled grid's margins and rows, a header centred over its group,
per-column sub-labels, and where a caption starts under its image."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from imgalign.eval.gallery import PAD, caption_grid, font, labelled_grid

RED, BLUE, GREEN, PURPLE = (255, 0, 0), (0, 0, 255), (0, 160, 0), (200, 0, 200)
WHITE = (255, 255, 255)


def _rows_of(a: np.ndarray, colour: tuple[int, int, int]) -> np.ndarray:
    return np.nonzero((a == colour).all(-1).any(1))[0]


def _cols_of(a: np.ndarray, colour: tuple[int, int, int]) -> np.ndarray:
    return np.nonzero((a == colour).all(-1).any(0))[0]


def _four(**kw: object) -> Image.Image:
    """One row of four 16 px images in two groups of two columns."""
    ims = [[Image.new("RGB", (16, 16), c) for c in (RED, GREEN, BLUE, PURPLE)]]
    args: dict[str, object] = {"row_labels": ["p"], "col_labels": ["A", "B"], "group": 2, "cell": 16}
    args.update(kw)
    return labelled_grid(ims, label_width=40, **args)  # type: ignore[arg-type]


def test_a_grid_keeps_two_pads_of_white_right_of_its_last_image() -> None:
    """Width = label column + a (cell + PAD) per column + PAD: the last image is followed by its own PAD and the
    margin PAD. Without the margin the last column's pad was the edge."""
    g = _four()
    a = np.asarray(g)
    assert g.width == 40 + 4 * (16 + PAD) + PAD
    assert g.width - 1 - _cols_of(a, PURPLE).max() == 2 * PAD
    assert (a[:, -2 * PAD :] == WHITE).all()


def test_a_grid_row_starts_a_pad_below_the_caption_of_the_row_above() -> None:
    """A row is the cell, its caption's height and a PAD, plus the row PAD: the second row's image starts at
    least a PAD under the first row's caption ink. Without the caption's PAD the gap was under a PAD."""
    ims = [[Image.new("RGB", (16, 16), RED)], [Image.new("RGB", (16, 16), BLUE)]]
    g = np.asarray(labelled_grid(ims, [" ", " "], [" "], captions=[["Ag"], ["x"]], cell=16, label_width=40))
    blue_top = _rows_of(g, BLUE).min()
    ink = np.nonzero(((g != 255).any(-1) & ~(g == RED).all(-1) & ~(g == BLUE).all(-1)).any(1))[0]
    caption_bottom = ink[ink < blue_top].max()
    assert _rows_of(g, RED).max() < caption_bottom
    assert blue_top - caption_bottom - 1 >= PAD


def test_a_group_header_is_centred_over_the_span_of_its_groups_images() -> None:
    """The header's ink is centred over its group's images (two cells and the PAD between them), not shifted half
    a PAD to the right (centred over the group's width including the trailing PAD)."""
    a = np.asarray(_four(col_labels=["I", " "]))
    top = _rows_of(a, RED).min()
    ink = np.nonzero((a[:top] != WHITE).any(-1).any(0))[0]
    span = (_cols_of(a, RED).min() + _cols_of(a, GREEN).max()) / 2
    assert len(ink) and abs((ink.min() + ink.max()) / 2 - span) <= 1.5


def test_sub_labels_one_per_column_label_each_column_of_every_group() -> None:
    """`sub_labels` may name every column (its index runs over all columns, modulo their count): the second
    group's sub-labels are its own. Indexing by the column within its group drew the first group's there."""
    own = np.asarray(_four(sub_labels=["s0", "s1", "s2", "s3"]))
    repeated = np.asarray(_four(sub_labels=["s0", "s1", "s0", "s1"]))
    diff_cols = np.nonzero((own != repeated).any(-1).any(0))[0]
    assert len(diff_cols)
    assert diff_cols.min() >= _cols_of(own, BLUE).min() - PAD
    top = _rows_of(own, RED).min()
    assert np.nonzero((own != repeated).any(-1).any(1))[0].max() < top


def test_a_caption_starts_two_pixels_under_its_image_in_a_gallery_and_a_grid() -> None:
    """A caption's text box is placed 2 px under its image's cell, so its ink starts at cell + 2 + the font's
    top bearing (the box's top at the origin). Drawn at the cell's edge it sat 2 px higher."""
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    for size, a in (
        (11, np.asarray(caption_grid([Image.new("RGB", (16, 16), RED)], ["Ag"], cell=16))),
        (12, np.asarray(labelled_grid([[Image.new("RGB", (16, 16), RED)]], [" "], [" "], [["Ag"]], cell=16))),
    ):
        red_bottom = _rows_of(a, RED).max()
        ink = np.nonzero(((a != 255).any(-1) & ~(a == RED).all(-1)).any(1))[0]
        below = ink[ink > red_bottom]
        top_bearing = probe.multiline_textbbox((0, 0), "Ag", font=font(size), spacing=2)[1]
        assert below.min() == red_bottom + 1 + 2 + top_bearing, size

"""eval/gallery.py: word wrapping at its limits and where a labelled grid puts its headers, sub-labels and images
(mutation round 22)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageDraw

from imgalign.eval.gallery import PAD, font, labelled_grid, wrap

WHITE = (255, 255, 255)
COLOURS = [(255, 0, 0), (0, 160, 0), (0, 0, 255), (200, 0, 200)]


def _width(text: str, size: int = 12) -> float:
    return ImageDraw.Draw(Image.new("RGB", (1, 1))).textlength(text, font=font(size))


def _rows_of(grid: Image.Image, colour: tuple[int, int, int]) -> np.ndarray:
    return np.nonzero((np.asarray(grid) == colour).all(-1).any(1))[0]


def _cols_of(grid: Image.Image, colour: tuple[int, int, int]) -> np.ndarray:
    return np.nonzero((np.asarray(grid) == colour).all(-1).any(0))[0]


def _diff_rows_cols(a: Image.Image, b: Image.Image) -> tuple[np.ndarray, np.ndarray]:
    assert a.size == b.size
    d = (np.asarray(a) != np.asarray(b)).any(-1)
    return np.nonzero(d.any(1))[0], np.nonzero(d.any(0))[0]


def _grid(**kw: object) -> Image.Image:
    """One row of four 16 px images in two groups of two columns (two models' two seeds)."""
    ims = [[Image.new("RGB", (16, 16), c) for c in COLOURS]]
    args: dict[str, object] = {"row_labels": ["p"], "col_labels": ["A", "B"], "group": 2, "cell": 16}
    args.update(kw)
    return labelled_grid(ims, label_width=40, **args)  # type: ignore[arg-type]


def test_a_line_exactly_as_wide_as_the_width_stays_one_line() -> None:
    assert wrap("abc def", _width("abc def"), font()) == "abc def"


def test_a_word_broken_between_characters_keeps_at_least_four_a_line() -> None:
    """Narrower than four characters, a long word is still cut into pieces of four (the last is the rest)."""
    lines = wrap("abcdefghij", _width("ab"), font()).split("\n")
    assert lines == ["abcd", "efgh", "ij"]


def test_exactly_max_lines_lines_are_kept_whole_and_one_more_ends_in_an_ellipsis() -> None:
    assert wrap("one\ntwo\nthree", 400, font(), 3) == "one\ntwo\nthree"
    cut = wrap("one\ntwo\nthree\nfour", 400, font(), 3).split("\n")
    assert cut == ["one", "two", "three…"]  # was "thre…": a letter dropped that fitted beside the '…'


def test_the_line_that_ends_in_an_ellipsis_still_fits_the_width() -> None:
    """Narrow letters that fill a line: the ellipsis, wider than an 'i', takes the room of more than one."""
    width = _width("iiiiiiii")
    lines = wrap("iiiiiiii iiiiiiii iiiiiiii", width, font(), 2).split("\n")
    assert len(lines) == 2 and lines[-1].endswith("…")
    assert all(_width(line) <= width for line in lines)


def test_captions_of_a_row_that_do_not_line_up_with_its_images_are_refused() -> None:
    ims = [[Image.new("RGB", (8, 8)), Image.new("RGB", (8, 8))]]
    with pytest.raises(ValueError, match="one caption per image"):
        labelled_grid(ims, ["p"], ["a", "b"], captions=[["only one"]], cell=16)


def test_seed_sub_labels_add_a_row_between_the_headers_and_the_images() -> None:
    """With sub-labels the images move down by that row (and the grid grows by it); without, no room is kept."""
    plain, sub = _grid(), _grid(sub_labels=["s0", "s1"])
    shift = _rows_of(sub, COLOURS[0]).min() - _rows_of(plain, COLOURS[0]).min()
    assert shift > 0
    assert sub.height - plain.height == shift


def test_sub_labels_are_drawn_under_the_headers_and_above_the_images() -> None:
    blank = _grid(sub_labels=[" ", " "])
    top = _rows_of(blank, COLOURS[0]).min()
    header_ink = np.nonzero((np.asarray(blank)[:top] != WHITE).any(-1).any(1))[0]
    sub_rows, _ = _diff_rows_cols(_grid(sub_labels=["s0", "s1"]), blank)
    assert len(header_ink) and len(sub_rows)
    assert header_ink.max() < sub_rows.min() and sub_rows.max() < top


def test_a_group_header_is_centred_over_its_own_columns() -> None:
    """The second model's header lies over the third and fourth images, not over the second."""
    rows, cols = _diff_rows_cols(_grid(col_labels=["A", "B"]), _grid(col_labels=["A", " "]))
    assert len(cols)
    g = _grid()
    assert _cols_of(g, COLOURS[2]).min() <= cols.min() and cols.max() <= _cols_of(g, COLOURS[3]).max()
    assert rows.max() < _rows_of(g, COLOURS[0]).min()


def test_the_header_ink_ends_above_the_images() -> None:
    """A header is a PAD from the top and a PAD from the images: its ink never touches them."""
    g = _grid(col_labels=["Ag", "Ag"])
    top = _rows_of(g, COLOURS[0]).min()
    ink = np.nonzero((np.asarray(g)[:top] != WHITE).any(-1).any(1))[0]
    assert len(ink) and ink.min() >= PAD // 2 and ink.max() < top - 1


def test_a_group_header_wider_than_one_image_uses_the_width_of_its_group() -> None:
    """A header that fits over the group's two images stays one line (it was wrapped to one image's width)."""
    text = "bjbjbjbjbjbjb"
    assert 64 < _width(text, 14) < 2 * 64 - PAD
    ims = [[Image.new("RGB", (16, 16))] * 2]
    long = labelled_grid(ims, ["p"], [text], group=2, cell=16 * 4, label_width=40)
    short = labelled_grid(ims, ["p"], ["bj"], group=2, cell=16 * 4, label_width=40)
    assert long.height == short.height


def test_an_image_that_is_not_square_is_centred_in_its_cell() -> None:
    """A 2:1 image fills the cell's width and sits in the middle of its height, beside a square one."""
    red, blue = COLOURS[0], COLOURS[2]
    ims = [[Image.new("RGB", (16, 16), red), Image.new("RGB", (32, 16), blue)]]
    g = labelled_grid(ims, ["p"], ["a", "b"], cell=16, label_width=40)
    assert _rows_of(g, blue).min() - _rows_of(g, red).min() == 4
    assert len(_rows_of(g, blue)) == 8


def test_a_caption_is_written_under_its_image_not_over_it() -> None:
    red = COLOURS[0]
    g = labelled_grid(
        [[Image.new("RGB", (16, 16), red)]], ["p"], ["a"], captions=[["Ag"]], cell=16, label_width=40
    )
    a = np.asarray(g)
    rows, cols = _rows_of(g, red), _cols_of(g, red)
    cell = a[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1]
    assert cell.shape[:2] == (16, 16) and (cell == red).all()
    below = a[rows.max() + 1 :, cols.min() : cols.max() + 1]
    assert (below != WHITE).any()


def test_a_gallery_of_fewer_images_than_columns_is_as_wide_as_its_images() -> None:
    from imgalign.eval.gallery import caption_grid

    ims = [Image.new("RGB", (8, 8))] * 2
    assert (
        caption_grid(ims, ["a", "b"], ncols=6, cell=16).size
        == caption_grid(ims, ["a", "b"], ncols=2, cell=16).size
    )


def test_the_last_row_of_a_gallery_that_is_not_full_is_drawn() -> None:
    """Seven images in rows of three: three rows, the seventh image on the last."""
    from imgalign.eval.gallery import caption_grid

    ims = [Image.new("RGB", (8, 8), (10 * i, 0, 0)) for i in range(6)] + [
        Image.new("RGB", (8, 8), COLOURS[2])
    ]
    g = caption_grid(ims, ["x"] * 7, ncols=3, cell=16)
    rows = _rows_of(g, COLOURS[2])
    assert len(rows) == 16 and rows.max() < g.height - PAD


def test_a_gallery_caption_keeps_as_many_lines_as_asked() -> None:
    from imgalign.eval.gallery import caption_grid

    caption = "\n".join(f"line {i}" for i in range(10))
    ims = [Image.new("RGB", (8, 8))]
    heights = [caption_grid(ims, [caption], cell=64, lines=n).height for n in (6, 8, 10)]
    assert heights[0] < heights[1] < heights[2]


def test_save_png_makes_the_folders_it_writes_into(tmp_path) -> None:
    from imgalign.eval.gallery import save_png

    target = tmp_path / "a" / "b" / "grid.png"
    save_png(Image.new("RGB", (4, 4), COLOURS[1]), target)
    with Image.open(target) as im:
        assert im.size == (4, 4) and im.getpixel((0, 0)) == COLOURS[1]


def test_a_gallery_caption_is_written_under_its_image() -> None:
    from imgalign.eval.gallery import caption_grid

    red = COLOURS[0]
    a = np.asarray(caption_grid([Image.new("RGB", (16, 16), red)], ["Ag"], cell=16))
    rows = np.nonzero((a == red).all(-1).any(1))[0]
    cols = np.nonzero((a == red).all(-1).any(0))[0]
    assert (a[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1] == red).all()
    assert len(rows) == 16 and (a[rows.max() + 1 :] != WHITE).any()


def test_a_grid_of_rows_without_images_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="at least one row and one column"):
        labelled_grid([[]], ["p"], [], cell=16)

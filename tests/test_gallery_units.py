"""eval/gallery.py: image fitting and grid geometry at their edges (mutation round 10)."""

from __future__ import annotations

import pytest
from PIL import Image

from imgalign.eval.gallery import fit


def test_fit_keeps_a_side_of_one_pixel_for_a_very_thin_image() -> None:
    """A 1 x 200 strip in a 16 px cell is 1 x 16, not a zero-width image PIL cannot make."""
    assert fit(Image.new("RGB", (1, 200)), 16).size == (1, 16)
    assert fit(Image.new("RGB", (300, 2)), 30).size == (30, 1)


def test_a_gallery_row_starts_below_the_captions_of_the_row_above() -> None:
    """Rows of a gallery are a cell, its caption and a PAD apart: the second row's image starts a PAD under the
    first row's caption, not on top of it."""
    import numpy as np

    from imgalign.eval.gallery import PAD, caption_grid

    red, blue, cell = (255, 0, 0), (0, 0, 255), 16
    ims = [Image.new("RGB", (8, 8), red), Image.new("RGB", (8, 8), blue)]
    g = np.asarray(caption_grid(ims, ["Ag\nAg\nAg", "x"], ncols=1, cell=cell))
    red_rows = np.nonzero((g == red).all(-1).any(1))[0]
    blue_top = np.nonzero((g == blue).all(-1).any(1))[0].min()
    ink = np.nonzero(((g != 255).any(-1) & ~(g == red).all(-1) & ~(g == blue).all(-1)).any(1))[0]
    caption_bottom = ink[ink < blue_top].max()
    assert red_rows.max() < caption_bottom  # the first caption is under its image
    assert blue_top - caption_bottom - 1 >= PAD


def test_wrap_keeps_a_blank_line_between_paragraphs() -> None:
    """A caption's blank line (a paragraph break, as in a judge's reason) stays a blank line; an empty text is
    an empty caption (mutation round 18)."""
    from imgalign.eval.gallery import font, wrap

    assert wrap("first\n\nsecond", 400, font()) == "first\n\nsecond"
    assert wrap("", 400, font()) == ""


def test_fit_filters_a_palette_image_it_shrinks_as_it_does_an_rgb_one() -> None:
    """A palette ("P") image, as a GIF or an 8-bit PNG reads, is made RGB before it is resized: PIL resizes a
    palette image with nearest-neighbour whatever it is asked, so a fine checkerboard shrunk by half stayed black
    and white instead of the grey an RGB image gives (mutation round 18)."""
    import numpy as np

    board = (np.indices((32, 32)).sum(0) % 2 * 255).astype(np.uint8)
    rgb = Image.fromarray(np.stack([board] * 3, -1))
    small = fit(rgb.convert("P"), 16)
    assert small.mode == "RGB"
    assert np.array_equal(np.asarray(small), np.asarray(fit(rgb, 16)))
    assert 0 < np.asarray(small).mean() < 255 and not np.isin(np.asarray(small), (0, 255)).all()


def test_a_grid_whose_columns_are_not_whole_groups_is_refused() -> None:
    """Three images a row in groups of two (one model's two seeds): one header covers two columns, the third has
    none; the grid is refused, not drawn with a headless column (mutation round 18)."""
    import pytest

    from imgalign.eval.gallery import labelled_grid

    ims = [[Image.new("RGB", (8, 8)) for _ in range(3)]]
    with pytest.raises(ValueError, match="do not line up"):
        labelled_grid(ims, ["p"], ["m1"], group=2, cell=16)
    assert labelled_grid([row[:2] for row in ims], ["p"], ["m1"], group=2, cell=16)


def test_a_grid_caption_keeps_three_lines() -> None:
    """A grid's captions are cut to three lines: a caption of five lines makes the grid no taller than one of
    three, and one of two lines leaves it shorter (mutation round 18)."""
    from imgalign.eval.gallery import labelled_grid

    def height(caption: str) -> int:
        return labelled_grid([[Image.new("RGB", (8, 8))]], ["p"], ["m"], captions=[[caption]], cell=16).height

    assert height("a\nb\nc\nd\ne") == height("a\nb\nc") > height("a\nb")


def test_a_long_row_label_is_wrapped_inside_its_column_and_its_pads() -> None:
    """A row label is wrapped to the label column less a PAD either side: a long run of letters of average width
    stops a PAD short of the images (mutation round 18; wrapped to the whole column it ran into the images' pad)."""
    import numpy as np

    from imgalign.eval.gallery import LABEL_WIDTH, PAD, labelled_grid

    white = Image.new("RGB", (8, 8), (255, 255, 255))
    g = np.asarray(labelled_grid([[white]], ["abcdefghijklmnopqrstuvwxyz" * 3], ["m"], cell=16))
    ink = np.nonzero((g[:, :LABEL_WIDTH] != 255).any(-1).any(0))[0]
    assert ink.min() >= PAD and ink.max() < LABEL_WIDTH - PAD


def test_a_caption_grid_of_no_columns_is_refused_by_name():
    """ncols=0 was a bare ZeroDivisionError from the row count."""
    from imgalign.eval.gallery import caption_grid

    with pytest.raises(ValueError, match=r"at least one column \(got ncols=0\)"):
        caption_grid([Image.new("RGB", (8, 8))], ["a"], ncols=0)


def test_wrapped_lines_fit_their_width_as_measured_for_wide_letters_and_long_words() -> None:
    """wrap measured the alphabet's average glyph width: 26 'W's (286 px) or 26 'a's (182 px) were one line of a
    168 px row label and ran over into the grid's images. Every line now fits as the font measures it; a cut line
    ends in '…' and fits too."""
    from PIL import ImageDraw

    from imgalign.eval.gallery import font, wrap

    f = font(12)
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    for text in ("W" * 40, "MMMM WWWW " * 4, "a" * 60, "checkpoint step-000300 of run W"):
        lines = wrap(text, 168, f, 10).split("\n")
        assert all(probe.textlength(line, font=f) <= 168 for line in lines)
        assert "".join(lines).replace(" ", "") == text.replace(" ", "")  # nothing lost but spaces at breaks
    cut = wrap("W" * 100, 60, f, 2).split("\n")
    assert len(cut) == 2 and cut[1].endswith("…") and probe.textlength(cut[1], font=f) <= 60

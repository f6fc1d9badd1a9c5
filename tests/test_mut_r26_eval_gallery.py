"""eval/gallery.py (mutation round 26): a five-letter word wider than a line is broken too, an image narrower than
its cell is centred in it, and a gallery keeps a margin below its last row."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from imgalign.eval.gallery import PAD, caption_grid, font, labelled_grid, wrap

RED = (255, 0, 0)


def _width(text: str) -> float:
    return ImageDraw.Draw(Image.new("RGB", (1, 1))).textlength(text, font=font())


def test_a_five_letter_word_wider_than_the_line_is_broken_after_four() -> None:
    """Only words of at most four letters are left whole when too wide (a line keeps at least four). Breaking
    only words of more than five letters left 'WWWWW' whole, running a letter past a line as wide as 'WWWW'."""
    assert _width("WWWWW") > _width("WWWW")
    assert wrap("WWWWW", _width("WWWW"), font()) == "WWWW\nW"
    assert wrap("WWWW", _width("WWW"), font()) == "WWWW"


def test_an_image_narrower_than_its_cell_is_centred_in_it() -> None:
    """An 8 x 32 image in a 16 px cell is fitted to 4 x 16 and pasted (16 - 4) // 2 = 6 px into the cell: with a
    40 px label column, columns 46..49. Pasted at the cell's left edge (columns 40..43) it sat against the
    label column, out of line with the square images of the other rows."""
    grid = labelled_grid([[Image.new("RGB", (8, 32), RED)]], ["p"], ["m"], cell=16, label_width=40)
    red_cols = np.nonzero((np.asarray(grid) == RED).all(-1).any(0))[0]
    assert red_cols.tolist() == [46, 47, 48, 49]


def test_a_gallery_keeps_a_pad_below_its_last_row_as_above_its_first() -> None:
    """A gallery of one column is PAD + n x (row pitch) tall: one more image adds one pitch, and the rest is the
    PAD margin (one image: pitch + PAD; two: 2 pitch + PAD). Without the final PAD, the last caption's row ended at
    the canvas edge, with no margin below it."""
    ims = [Image.new("RGB", (16, 16), RED)] * 2
    one = caption_grid(ims[:1], ["a"], ncols=1, cell=16)
    two = caption_grid(ims, ["a", "a"], ncols=1, cell=16)
    assert one.width == two.width == 16 + 2 * PAD
    assert 2 * one.height - two.height == PAD
    red_rows = np.nonzero((np.asarray(one) == RED).all(-1).any(1))[0]
    assert red_rows.tolist() == list(range(PAD, PAD + 16))

"""eval/gallery.fit, mutation round 32f survivor A07 (`Image.NEAREST if s > 1 else Image.LANCZOS` made LANCZOS):
an image enlarged into its cell keeps its pixels (each one a block of its own colour), not blurred between them."""

from __future__ import annotations

from PIL import Image

from imgalign.eval.gallery import fit


def test_an_enlarged_image_keeps_its_pixels() -> None:
    img = Image.new("RGB", (2, 2), (0, 0, 0))
    img.putpixel((1, 0), (255, 255, 255))
    img.putpixel((0, 1), (255, 255, 255))
    big = fit(img, 8)
    assert big.size == (8, 8)
    assert {c for _, c in big.getcolors()} == {(0, 0, 0), (255, 255, 255)}
    assert big.getpixel((3, 0)) == (0, 0, 0) and big.getpixel((4, 0)) == (255, 255, 255)

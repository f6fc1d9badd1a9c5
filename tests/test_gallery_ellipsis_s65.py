"""A label cut short for the gallery ends in its last word and '…', not in a space and '…' ("abc …")."""

from __future__ import annotations

from PIL import ImageFont

from imgalign.eval.gallery import wrap


def test_a_label_cut_at_a_space_ends_in_its_last_letter_and_the_ellipsis() -> None:
    font = ImageFont.load_default()
    text = "\n".join(["x"] * 5 + ["aaaa i", "cc"])
    cut = [wrap(text, width, font).split("\n")[-1] for width in range(10, 120)]
    assert "aaaa…" in cut  # a width at which the cut falls at the space
    assert not [c for c in cut if c.endswith(" …")]

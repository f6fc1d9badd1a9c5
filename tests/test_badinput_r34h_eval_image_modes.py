"""Bad-input round 34h: `imgalign eval --images` reads odd image files as `imgalign score` does."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from imgalign import shapes as W
from imgalign.cli import main
from imgalign.eval.suite import load_image, write_prompt_folder
from imgalign.rewards.io import read_image
from tests.conftest import strict_score_and_eval

SPEC = W.single_object("triangle")


def _grey_alpha_on_white(image: Image.Image, path: Path) -> Path:
    """`image` as grey+alpha (LA) whose background is transparent and holds white, as editors may store it."""
    rgb = np.asarray(image)
    background = (rgb == rgb[0, 0]).all(-1)
    grey = np.asarray(image.convert("L")).copy()
    alpha = np.full(grey.shape, 255, np.uint8)
    grey[background], alpha[background] = 255, 0
    Image.fromarray(np.dstack([grey, alpha]), "LA").save(path)
    return path


def test_eval_and_score_judge_a_transparent_png_alike(tmp_path: Path) -> None:
    """eval read the file with PIL's convert("RGB"), which drops the alpha: the white under the transparent
    background showed, and the triangle was "found 0" (incorrect), while `score --reward geneval:mode=strict` (which
    composites on black, documented to judge as eval does) scored the same file 1."""
    gen = tmp_path / "gen"
    write_prompt_folder(gen, 0, SPEC.to_metadata(), [])
    _grey_alpha_on_white(W.render(SPEC, 1)[0], gen / "00000" / "samples" / "0000.png")
    assert strict_score_and_eval(gen, tmp_path) == ({"geneval:mode=strict": 1.0}, 1.0)


@pytest.mark.parametrize("mode", ["RGBA", "LA", "P"])
def test_eval_reads_transparent_pixels_as_the_rewards_do(tmp_path: Path, mode: str) -> None:
    image = W.render(SPEC, 0)[0]
    path = _grey_alpha_on_white(image, tmp_path / "x.png")
    with Image.open(path) as la:
        im = la.convert(mode) if mode != "P" else la.convert("RGBA").quantize(8)
    if mode == "P":  # palette with a transparent entry: the background's
        im.info["transparency"] = im.getpixel((0, 0))
        im.save(path, transparency=im.getpixel((0, 0)))
    else:
        im.save(path)
    assert load_image(path).tobytes() == read_image(path).tobytes()


def test_eval_names_an_animated_sample_judged_by_its_first_frame(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A GIF or APNG saved as 0000.png: eval judged its first frame without a word (score warns of it)."""
    gen = tmp_path / "gen"
    write_prompt_folder(gen, 0, SPEC.to_metadata(), [])
    sample = gen / "00000" / "samples" / "0000.png"
    first = W.render(SPEC, 0)[0]
    first.save(sample, format="GIF", save_all=True, append_images=[Image.new("RGB", first.size, "white")])
    with caplog.at_level(logging.WARNING):
        assert main(["eval", "--images", str(gen), "--no-progress", "--out", str(tmp_path / "ev")]) == 0
    assert f"{sample} holds 2 frames; only the first is judged" in caplog.text

"""Bad-input round 23: a photo stored sideways with an EXIF orientation tag (as phones save portrait shots)."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from imgalign import shapes as W
from imgalign.eval.suite import load_image, write_prompt_folder
from imgalign.rewards.io import read_image
from tests.conftest import strict_score_and_eval

SPEC = W.position("circle", "left of", "square")


def _sideways(image: Image.Image, path: Path) -> Path:
    """`image` stored turned a quarter, with the EXIF tag (orientation 6: turn 90 degrees clockwise to view) that
    shows it upright."""
    exif = Image.Exif()
    exif[0x0112] = 6
    image.transpose(Image.Transpose.ROTATE_90).save(path, exif=exif)
    return path


def test_an_image_with_an_exif_orientation_is_read_upright(tmp_path: Path) -> None:
    image = W.render(SPEC, 0)[0]
    path = _sideways(image, tmp_path / "x.png")
    assert read_image(path).tobytes() == image.tobytes()
    assert load_image(path).tobytes() == image.tobytes()


def test_score_and_eval_judge_a_sideways_stored_photo_as_it_is_seen(tmp_path: Path) -> None:
    """A circle left of a square, stored sideways with its orientation tag: score and eval --images judged the
    stored pixels (the circle above or below the square) and failed it, 0 where a viewer sees a pass."""
    gen = tmp_path / "gen"
    write_prompt_folder(gen, 0, SPEC.to_metadata(), [])
    _sideways(W.render(SPEC, 0)[0], gen / "00000" / "samples" / "0000.png")
    assert strict_score_and_eval(gen, tmp_path) == ({"geneval:mode=strict": 1.0}, 1.0)


def test_a_folder_of_sideways_stored_photos_is_batched_at_their_upright_size(tmp_path: Path) -> None:
    """The size a folder is batched at came from the files' headers (the stored, sideways size), and the images,
    read upright, were squashed to it."""
    from imgalign.rewards.io import encode_image_folder, folder_image_size

    folder = tmp_path / "d"
    folder.mkdir()
    image = W.render(SPEC, 0)[0].resize((48, 32))
    for i in range(2):
        _sideways(image, folder / f"{i}.png")
    assert folder_image_size(folder) == (48, 32)
    assert tuple(encode_image_folder(folder, lambda x: x).shape) == (2, 3, 32, 48)

"""Mutation round 21: image files for rewards (rewards/io.py): behaviour no test checked before."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from imgalign.rewards.io import upright, upright_size


@pytest.mark.parametrize("orientation", range(1, 9))
def test_the_header_size_is_the_size_of_the_upright_image_for_every_orientation(
    tmp_path: Path, orientation: int
) -> None:
    """Orientations 5 to 8 are a quarter turn (5 and 7 transposed too): the size read from the header alone is the
    size the image has once turned upright; 1 to 4 keep it."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    path = tmp_path / "photo.jpg"
    Image.new("RGB", (20, 10), (200, 30, 30)).save(path, exif=exif)
    with Image.open(path) as im:
        want = upright(im).size
        assert upright_size(im) == want
    assert want == ((10, 20) if orientation >= 5 else (20, 10))


def _png(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (4, 4), (0, 120, 0)).save(path)
    return path


def test_one_file_named_in_several_spellings_is_listed_once(tmp_path: Path) -> None:
    """a/x.png, its absolute path, a/sub/../x.png and its folder name one file: it is scored (and counted in the
    means) once, under the first spelling."""
    from imgalign.rewards.io import find_images

    x = _png(tmp_path / "a" / "x.png")
    (tmp_path / "a" / "sub").mkdir()
    assert find_images([x, tmp_path / "a" / "sub" / ".." / "x.png", x.absolute(), tmp_path / "a"]) == [x]


def test_a_link_to_an_image_in_another_folder_is_kept_as_its_own_image(tmp_path: Path) -> None:
    """One image used for two prompt folders (b/x.png a link to a/x.png) is two rows: only a file's folder is
    resolved when repeats are dropped, not the file itself."""
    from imgalign.rewards.io import find_images

    x = _png(tmp_path / "a" / "x.png")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x.png").symlink_to(x)
    assert find_images([tmp_path]) == [x, tmp_path / "b" / "x.png"]

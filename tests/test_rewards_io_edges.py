"""`imgalign.rewards.io` at edges the score tests leave open."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.rewards.io import ImageReadError, find_images, read_image


def test_a_glob_matching_a_dangling_link_lists_only_the_real_files(tmp_path: Path) -> None:
    """A glob's match that is neither a file nor a folder (a link to a deleted file) is no image file, as in a
    folder walk: only the real files are listed."""
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.png").write_bytes(b"")
    (d / "gone.png").symlink_to(tmp_path / "deleted.png")
    assert find_images([str(d / "*.png")]) == [d / "a.png"]


def test_an_empty_file_is_named_once_with_its_own_reason(tmp_path: Path) -> None:
    """An empty file's error is the file and "empty file (0 bytes)", not that message wrapped again as "cannot
    decode image (...)" naming the file twice."""
    empty = tmp_path / "a.png"
    empty.write_bytes(b"")
    with pytest.raises(ImageReadError) as e:
        read_image(empty)
    assert str(e.value) == f"{empty}: empty file (0 bytes)"


def test_an_image_size_below_one_pixel_is_refused_by_name(tmp_path: Path) -> None:
    """size 0 (or a 0 side) was PIL's bare 'height and width must be > 0' from deep in the resize, in both the
    one-batch and the batch-at-a-time readers; (0, 0) and (4, 0) are refused before any image is read."""
    from PIL import Image

    from imgalign.rewards.io import encode_image_folder, pil_batch

    (tmp_path / "d").mkdir()
    Image.new("RGB", (6, 4)).save(tmp_path / "d" / "a.png")
    for size in (0, (4, 0), (0, 0), (4, 4, 4)):
        with pytest.raises(
            ValueError, match=r"image size must be a side or \(width, height\) of at least 1 pixel"
        ):
            pil_batch([Image.new("RGB", (4, 4))], size)
        with pytest.raises(ValueError, match="at least 1 pixel"):
            encode_image_folder(tmp_path / "d", lambda x: x, size)
    assert tuple(pil_batch([Image.new("RGB", (4, 4))], [3, 2]).shape) == (1, 3, 2, 3)

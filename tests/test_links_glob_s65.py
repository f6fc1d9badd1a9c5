"""A broken link whose name holds a glob character ('shot[1].png', a camera's numbering) is named as a broken link,
as a shell passes a pattern that matches nothing on as the name itself: it was "matches no file or folder; check
the pattern"."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image


def test_a_broken_link_named_like_a_pattern_is_named_as_a_broken_link(tmp_path: Path) -> None:
    from imgalign.rewards.io import find_images

    link = tmp_path / "shot[1].png"
    link.symlink_to(tmp_path / "unmounted" / "x.png")
    with pytest.raises(FileNotFoundError) as e:
        find_images([link])
    assert str(e.value) == (
        f"{str(link)!r} is a symlink to {str(tmp_path / 'unmounted' / 'x.png')!r}, which does not exist: restore "
        "its target, or give the image file itself"
    )
    # a pattern that matches nothing, and a pattern that matches, as before
    with pytest.raises(FileNotFoundError, match="matches no file or folder; check the pattern"):
        find_images([tmp_path / "none*.png"])
    Image.new("RGB", (8, 8)).save(tmp_path / "shot1.png")
    assert find_images([link]) == [tmp_path / "shot1.png"]

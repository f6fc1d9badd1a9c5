"""Bad-input round 31: image folders holding symlinks that loop."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image


def test_links_that_loop_are_named_as_a_loop_not_as_a_missing_target(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """a.png -> b.png -> a.png was "whose target does not exist, e.g. a.png -> b.png: restore or mount their
    targets", with b.png beside it; a loop is named as one, and a link whose target is gone still as before."""
    from imgalign.rewards.io import find_images

    folder = tmp_path / "imgs"
    folder.mkdir()
    Image.new("RGB", (8, 8)).save(folder / "ok.png")
    (folder / "a.png").symlink_to("b.png")
    (folder / "b.png").symlink_to("a.png")
    (folder / "self.png").symlink_to("self.png")
    (folder / "gone.png").symlink_to(tmp_path / "unmounted" / "gone.png")
    with caplog.at_level("WARNING"):
        assert find_images([folder]) == [folder / "ok.png"]
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        f"skipped 1 symlink(s) under {folder} whose target does not exist, e.g. {folder / 'gone.png'} -> "
        f"{tmp_path / 'unmounted' / 'gone.png'}: restore or mount their targets, or remove the links",
        f"skipped 3 symlink(s) under {folder} that lead back to themselves (a loop of links), e.g. "
        f"{folder / 'a.png'} -> b.png: point them at the image files, or remove the links",
    ]

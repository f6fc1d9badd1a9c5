"""Mutation round 27i: rewards/io.py's words for symlinks that loop or lead nowhere."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PIL import Image

from imgalign.rewards.io import find_images


def test_a_folder_whose_only_bad_links_loop_warns_of_the_loop_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With no link to a missing target beside them, the "whose target does not exist" warning is not given (it
    would name gone[0] of an empty list)."""
    folder = tmp_path / "imgs"
    folder.mkdir()
    Image.new("RGB", (8, 8)).save(folder / "ok.png")
    (folder / "self.png").symlink_to("self.png")
    with caplog.at_level("WARNING"):
        assert find_images([folder]) == [folder / "ok.png"]
    assert [r.getMessage() for r in caplog.records] == [
        f"skipped 1 symlink(s) under {folder} that lead back to themselves (a loop of links), e.g. "
        f"{folder / 'self.png'} -> self.png: point them at the image files, or remove the links"
    ]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_named_link_to_something_that_exists_but_is_no_file_is_not_said_to_lead_nowhere(
    tmp_path: Path,
) -> None:
    """A link to a FIFO (or /dev/null) was "a symlink to 'pipe', which does not exist: restore its target": it is
    there, and not a file, as the FIFO named itself is."""
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "link.png").symlink_to("pipe")
    for name in ("link.png", "pipe"):
        with pytest.raises(FileNotFoundError) as e:
            find_images([tmp_path / name])
        assert str(e.value) == f"{str(tmp_path / name)!r} is not a file, folder or glob that matches anything"

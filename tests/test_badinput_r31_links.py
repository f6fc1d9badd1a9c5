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


def test_a_named_link_whose_target_is_gone_or_loops_is_named_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`imgalign score broken.png` said "'broken.png' is not a file, folder or glob that matches anything" of a
    link that `ls` lists; it says where the link points and why that is not read, before any reward loads."""
    from imgalign.cli import main

    (tmp_path / "broken.png").symlink_to(tmp_path / "unmounted" / "x.png")
    (tmp_path / "a.png").symlink_to("b.png")
    (tmp_path / "b.png").symlink_to("a.png")
    out = tmp_path / "s.jsonl"
    assert main(["score", str(tmp_path / "broken.png"), "--reward", "artifact", "--out", str(out)]) == 2
    assert (
        f"{str(tmp_path / 'broken.png')!r} is a symlink to {str(tmp_path / 'unmounted' / 'x.png')!r}, which does not "
        "exist: restore its target, or give the image file itself"
    ) in capsys.readouterr().err
    assert main(["score", str(tmp_path / "a.png"), "--reward", "artifact", "--out", str(out)]) == 2
    assert (
        f"{str(tmp_path / 'a.png')!r} is a symlink to 'b.png', which leads back to itself (a loop of links): "
        "point it at the image file, or give the image file itself"
    ) in capsys.readouterr().err
    assert not out.exists()

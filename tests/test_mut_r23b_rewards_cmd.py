"""imgalign rewards commands: edges that round 23's second mutation pass left open."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from imgalign.cli import main
from imgalign.commands.rewards_cmd import ARTIFACT_CARD, artifact_folder_clash


def test_an_empty_readme_in_the_artifact_folder_is_nothing_to_lose(tmp_path: Path) -> None:
    """`build-shapes-artifact --out DIR`: an empty README.md (touched beforehand) holds nothing the model card would
    replace, so it is taken like a missing one; a README.md with text is refused unless it is the model's card
    (R37)."""
    out = tmp_path / "model"
    out.mkdir()
    card = out / "README.md"
    card.write_bytes(b"")
    assert artifact_folder_clash(out) is None
    card.write_text(f"{ARTIFACT_CARD}\n\nmore\n")
    assert artifact_folder_clash(out) is None
    card.write_text("\n")
    assert artifact_folder_clash(out) == "a README.md that is not the shapes artifact model's card"


def test_fd_refuses_an_image_file_whose_suffix_is_upper_case(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`imgalign rewards fd PHOTO.PNG DIR`: an image file named in capitals is called an image file, with the folder
    that holds it to give instead, as `photo.png` is (R43)."""
    photo = tmp_path / "PHOTO.PNG"
    Image.new("RGB", (8, 8)).save(photo, format="PNG")
    (tmp_path / "ref").mkdir()
    assert main(["rewards", "fd", str(photo), str(tmp_path / "ref")]) == 2
    assert (
        f"{str(photo)!r} is an image file; fd compares two image folders or stats files"
        in capsys.readouterr().err
    )


def test_fd_refuses_more_renders_than_the_default_between_two_folders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`imgalign rewards fd A B --n 5000` (more renders than the default, no 'shapes' side) is refused as --n 500 is:
    each folder is read whole, so the --n was not used (R46)."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    assert main(["rewards", "fd", str(tmp_path / "a"), str(tmp_path / "b"), "--n", "5000"]) == 2
    assert "--n 5000 counts the renders of 'shapes'" in capsys.readouterr().err

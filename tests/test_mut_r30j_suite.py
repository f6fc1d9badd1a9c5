"""eval/suite.load_image warns that only the first frame is judged only of an image of several frames, and only
where it is told the file to name; copy_folder calls a sample a folder only when it is one (round 30j survivors
S2/S11: the `shown is not None` condition dropped or made `or`, S3: a format without n_frames (JPEG) taken for
two frames, S10: `not s.is_file()` for `s.is_dir()`, S13: the folder message's second remedy dropped)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from PIL import Image

from imgalign import shapes as W
from imgalign.cli import main
from imgalign.eval.suite import copy_folder, load_image, write_prompt_folder

SPEC = W.single_object("circle")


def _gif(path: Path) -> Path:
    first = W.render(SPEC, 0)[0]
    first.save(path, format="GIF", save_all=True, append_images=[Image.new("RGB", first.size, "white")])
    return path


def test_an_animated_image_read_with_no_file_to_name_is_read_without_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """report's failures.png and sampling read samples with load_image(path): no "None holds 2 frames"."""
    path = _gif(tmp_path / "0000.png")
    with caplog.at_level(logging.WARNING):
        assert load_image(path).size == (64, 64)
    assert caplog.text == ""
    with caplog.at_level(logging.WARNING):
        load_image(path, tmp_path / "user.png")
    assert f"{tmp_path / 'user.png'} holds 2 frames" in caplog.text


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])  # a JPEG (saved as .png) has no n_frames: one frame
def test_an_image_of_one_frame_is_read_without_a_frames_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, fmt: str
) -> None:
    path = tmp_path / "0000.png"
    W.render(SPEC, 0)[0].save(path, format=fmt)
    with caplog.at_level(logging.WARNING):
        assert load_image(path, tmp_path / "user.png").size == (64, 64)
    assert "frames" not in caplog.text


def test_a_sample_that_is_a_dangling_link_is_not_called_a_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gen = tmp_path / "gen"
    write_prompt_folder(gen, 0, SPEC.to_metadata(), [W.render(SPEC, 0)[0]])
    write_prompt_folder(gen, 1, SPEC.to_metadata(), [])
    link = gen / "00001" / "samples" / "0000.png"
    link.symlink_to(tmp_path / "gone.png")
    argv = ["eval", "--images", str(gen), "--no-progress", "--out", str(tmp_path / "ev")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert str(link) in err
    assert "is a folder" not in err
    # named as a broken link, with its target and what to do (it was "[Errno 2] No such file or directory")
    assert (
        f"{link} is a symlink whose target does not exist ({tmp_path / 'gone.png'}): restore or mount its target, "
        "or remove the link"
    ) in err


def test_a_sample_folder_is_named_with_both_remedies(tmp_path: Path) -> None:
    gen = tmp_path / "gen"
    write_prompt_folder(gen, 0, SPEC.to_metadata(), [])
    odd = gen / "00000" / "samples" / "0000.png"
    odd.mkdir()
    with pytest.raises(IsADirectoryError) as e:
        copy_folder(gen, tmp_path / "copy")
    assert str(e.value) == (
        f"{odd} is a folder, where the GenEval layout holds an image (<index>/samples/<n>.png): move it out of the "
        "samples folder, or put the image in its place"
    )

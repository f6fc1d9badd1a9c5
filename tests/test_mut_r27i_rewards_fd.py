"""Mutation round 27i: `imgalign rewards fd`'s resizing of one side in `stats` features (_fd_resize)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from imgalign.cli import main

SAID = "depend on the image size"


def _fd(capsys: pytest.CaptureFixture[str], *args: str) -> float:
    assert main(["rewards", "fd", *args]) == 0
    return float(re.search(r"features: (\S+)", capsys.readouterr().out).group(1))


def _folders(tmp_path: Path, side: int) -> tuple[Path, Path]:
    """The same 8 noise images at side x side and, bicubic as fd resizes them, at the renders' 64x64."""
    small, large = tmp_path / "small", tmp_path / "large"
    small.mkdir()
    large.mkdir()
    rng = np.random.default_rng(0)
    for i in range(8):
        im = Image.fromarray(rng.integers(0, 255, (side, side, 3), dtype=np.uint8))
        im.save(small / f"{i}.png")
        im.resize((64, 64), Image.Resampling.BICUBIC).save(large / f"{i}.png")
    return small, large


def test_a_folder_given_first_beside_shapes_is_resized_to_the_renders_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """FOLDER shapes: the folder (not the renders) is read at 64x64, as `shapes FOLDER` reads it: its FD is that of
    the same images stored at 64x64, and the warning names the folder as the one resized."""
    small, large = _folders(tmp_path, 16)
    with caplog.at_level("WARNING"):
        resized = _fd(capsys, str(small), "shapes", "--features", "stats", "--n", "8")
    assert [r.getMessage() for r in caplog.records if SAID in r.getMessage()] == [
        f"the images of {str(small)!r} are 16x16 and those of 'shapes' 64x64: stats features depend on the image "
        f"size, so those of {str(small)!r} are resized to 64x64 (bicubic) to compare the images, not their sizes"
    ]
    assert resized == pytest.approx(
        _fd(capsys, str(large), "shapes", "--features", "stats", "--n", "8"), rel=1e-4
    )


def test_model_features_of_folders_of_two_sizes_are_not_resized_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A model encoder resizes every image to its own input size: nothing is said or resized beforehand."""
    small, large = _folders(tmp_path, 32)
    with caplog.at_level("WARNING"):
        _fd(capsys, str(small), str(large), "--features", "shapes-clip")
    assert not [r for r in caplog.records if SAID in r.getMessage()]

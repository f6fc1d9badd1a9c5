"""Mutation round 29 (helper d): rewards/fid.py survivors (the reference's image size: width x height, stats only)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from imgalign.rewards.fid import FIDReward, save_stats, stats_image_size

SAID = "depend on the image size"


def _noise_folder(folder: Path, w: int, h: int, n: int = 12) -> Path:
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    return folder


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if SAID in r.getMessage()]


def test_a_stats_file_gives_back_its_size_as_width_by_height_and_a_zero_side_is_refused(
    tmp_path: Path,
) -> None:
    mu, sigma = torch.zeros(3), torch.eye(3)
    save_stats(tmp_path / "wide.safetensors", mu, sigma, 4, "stats", image_size=(32, 16))
    assert stats_image_size(tmp_path / "wide.safetensors") == (32, 16)
    for bad in ((0, 16), (16, 0)):
        save_stats(tmp_path / "bad.safetensors", mu, sigma, 4, "stats", image_size=bad)
        with pytest.raises(ValueError, match=f"image_size metadata '{bad[0]}x{bad[1]}' is not WIDTHxHEIGHT"):
            stats_image_size(tmp_path / "bad.safetensors")


def test_images_of_a_non_square_reference_are_compared_as_height_by_width(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A reference of 32x16 (wide) images: images of that size are scored as they are, images of 16x32 (tall,
    the same sides swapped) are resized to it, with the warning."""
    ref = _noise_folder(tmp_path / "ref", 32, 16)
    r = FIDReward(features="stats", ref=str(ref), set_size=12, mode="group", init=str(ref))
    with caplog.at_level("WARNING"):
        r.score(torch.rand(2, 3, 16, 32), ["", ""], None)
        assert _said(caplog) == []
        r.score(torch.rand(2, 3, 32, 16), ["", ""], None)
    assert _said(caplog) == [
        "fid reward: the images scored or added to the set are 16x32 and the reference images 32x16: stats "
        "features depend on the image size, so they are resized to 32x16 (bicubic) to compare the images, not "
        "their sizes"
    ]


def test_a_model_encoder_takes_images_of_any_size_without_a_size_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Only stats features depend on the image size; a model encoder resizes each image to its own input."""
    ref = _noise_folder(tmp_path / "ref", 16, 16)
    with caplog.at_level("WARNING"):
        r = FIDReward(features="shapes-clip", ref=str(ref), set_size=4, mode="group", init=str(ref))
        r.score(torch.rand(2, 3, 32, 32), ["", ""], None)
    assert _said(caplog) == []

"""Round 25 (second pass) mutants of the image reader (imgalign.rewards.io) that the tests let through."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from PIL import Image

from imgalign.rewards.io import encode_image_folder, load_image_folder


def test_one_unreadable_image_in_a_folder_is_named_when_it_is_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A folder of one good and one empty .png loads as one image and says which file it skipped; with the warning
    given only for two or more unreadable files (m2D I06) a single broken file went without a word."""
    Image.new("RGB", (4, 4), (255, 0, 0)).save(tmp_path / "a.png")
    (tmp_path / "b.png").write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger="imgalign.rewards.io"):
        batch = load_image_folder(tmp_path)
    assert tuple(batch.shape) == (1, 3, 4, 4)
    skipped = [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()]
    assert len(skipped) == 1 and "skipped 1 unreadable image(s)" in skipped[0]
    assert "b.png: empty file (0 bytes)" in skipped[0]


def test_an_unreadable_last_file_after_a_full_batch_is_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The last file (sorted) is unreadable and the batch before it is full: the encoder was called on no images
    ("no images to batch (the images under ...)") when the empty chunk was batched (m2D I08); the file is skipped and
    named, and every readable image is encoded once."""
    Image.new("RGB", (4, 4), (255, 0, 0)).save(tmp_path / "a.png")
    Image.new("RGB", (4, 4), (0, 0, 255)).save(tmp_path / "b.png")
    (tmp_path / "c.png").write_bytes(b"not an image")
    seen: list[int] = []

    def encode(x: torch.Tensor) -> torch.Tensor:
        seen.append(x.shape[0])
        return x.mean(dim=(2, 3))

    with caplog.at_level(logging.WARNING, logger="imgalign.rewards.io"):
        out = encode_image_folder(tmp_path, encode, batch_size=2)
    assert seen == [2]
    assert out[:, 0].tolist() == [1.0, 0.0] and out[:, 2].tolist() == [0.0, 1.0]
    assert any("c.png" in r.getMessage() for r in caplog.records)

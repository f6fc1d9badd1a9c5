"""encode_image_folder names the folder in an encoder's ValueError and keeps the error's class."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from imgalign.rewards.io import encode_image_folder


class TooSmall(ValueError):
    """An encoder's own error, which a caller may catch by its class."""


def test_an_encoders_value_error_subclass_keeps_its_class_and_gains_the_folder(tmp_path):
    for n in range(2):
        Image.new("RGB", (4, 4)).save(tmp_path / f"{n}.png")

    def encode(images: torch.Tensor) -> torch.Tensor:
        raise TooSmall(f"images of {images.shape[-1]} pixels are too small")

    with pytest.raises(TooSmall) as e:
        encode_image_folder(tmp_path, encode)
    assert str(e.value) == f"images of 4 pixels are too small (the images under {str(tmp_path)!r})"

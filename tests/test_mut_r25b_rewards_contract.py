"""Round 25 (second pass) mutants of the reward contract (imgalign.rewards.base) that the tests let through."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from imgalign.rewards.base import to_tensor


def test_a_list_item_that_is_no_pil_image_is_refused_by_its_index_and_type() -> None:
    """A list of arrays (not PIL images) failed with "'numpy.ndarray' object has no attribute 'mode'" when the
    type check was dropped (m2D B08); the error names the item and what to give."""
    with pytest.raises(
        TypeError, match=r"image 1 is of type ndarray, expected a PIL image or a tensor batch"
    ):
        to_tensor([Image.new("RGB", (2, 2)), np.zeros((2, 2, 3), dtype=np.uint8)])

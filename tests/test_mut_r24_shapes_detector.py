"""eval/shapes_detector.py (mutation round 24): an array that is not H x W x 3 is refused by its shape, an RGBA
array included (its alpha channel is not a colour to unmix)."""

from __future__ import annotations

import numpy as np
import pytest

from imgalign.eval.shapes_detector import ShapesDetector


@pytest.mark.parametrize("shape", [(8, 8, 4), (8, 8), (8, 8, 1)])
def test_an_array_that_is_not_rgb_is_refused_naming_its_shape(shape: tuple[int, ...]) -> None:
    with pytest.raises(
        ValueError, match=rf"^expected an RGB image \(H, W, 3\), got shape \({', '.join(map(str, shape))}"
    ):
        ShapesDetector()(np.zeros(shape, dtype=np.uint8))

"""A transformers image processor's do_resize / do_rescale / do_normalize flags in our tensor transform
(rewards/features.image_processor_transform): each step runs only where the processor runs it, as transformers'
own processor does on the same pixels."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image


@pytest.mark.parametrize(
    "flags",
    [
        {},
        {"do_normalize": False},
        {"do_rescale": False},
        {"do_rescale": True, "rescale_factor": 1 / 127.5},
        {"do_resize": False},
        {"do_resize": False, "do_center_crop": False, "do_normalize": False},
    ],
    ids=["all", "no-normalize", "no-rescale", "factor", "no-resize", "nothing-but-rescale"],
)
def test_the_transform_follows_the_processor_s_flags(flags: dict[str, object]) -> None:
    """The flags were ignored: a processor with do_resize false still resized, one with do_normalize false still
    normalised, and do_rescale / rescale_factor were taken as 1/255 whatever they said."""
    from transformers import BitImageProcessor

    from imgalign.rewards.features import image_processor_transform

    proc = BitImageProcessor(
        size={"shortest_edge": 40},  # the image's own shortest edge: its resize changes no pixel
        crop_size={"height": 32, "width": 36},
        image_mean=[0.4, 0.5, 0.6],
        image_std=[0.2, 0.25, 0.3],
        do_convert_rgb=True,
        **flags,
    )
    # with a resize, an image of that shortest edge (PIL's and torch's bicubic differ); without, one it would resize
    hw = (40, 56) if flags.get("do_resize", True) else (48, 60)
    pixels = np.random.default_rng(0).integers(0, 256, size=(*hw, 3), dtype=np.uint8)
    want = torch.as_tensor(proc(images=Image.fromarray(pixels), return_tensors="np")["pixel_values"])
    x = torch.from_numpy(pixels).permute(2, 0, 1)[None].float() / 255
    got = image_processor_transform(proc, "x", "cpu", torch.float32)(x)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want.float(), rtol=1e-5, atol=1e-4)


def test_a_rescale_factor_that_is_no_positive_number_is_named() -> None:
    """A hand-edited ``rescale_factor: null`` raised a TypeError at the first image, and 0 made every pixel 0."""
    from transformers import BitImageProcessor

    from imgalign.rewards.features import image_processor_transform

    for bad in (None, 0, -1.0, "x"):
        proc = BitImageProcessor(size={"shortest_edge": 8}, crop_size={"height": 8, "width": 8})
        proc.rescale_factor = bad
        with pytest.raises(
            ValueError, match=r"^m: its image processor's rescale_factor .* is not a number > 0"
        ):
            image_processor_transform(proc, "m", "cpu", torch.float32)
    proc.do_rescale = False  # unread then
    image_processor_transform(proc, "m", "cpu", torch.float32)

"""imgalign.pretrain.encoder_common.render_pool lays its renders out with the stream the shipped encoders' pool was
drawn with (round 30f: seeding the layouts as the specs, pool_seed(seed) instead of pool_seed(seed) + 1, survived)."""

from __future__ import annotations

import random

from PIL import Image

from imgalign import shapes as W
from imgalign.pretrain import encoder_common as C


def test_the_pools_layouts_come_from_the_stream_one_past_its_specs_seed(monkeypatch):
    drawn: list[float] = []

    def render(spec, rng):
        drawn.append(rng.random())
        return Image.new("RGB", (W.IMAGE_SIZE, W.IMAGE_SIZE)), []

    monkeypatch.setattr(W, "render", render)
    monkeypatch.setattr(C, "captions", lambda spec, objs: {})
    C.render_pool(5, 3)
    layouts = random.Random(C.pool_seed(5) + 1)
    assert drawn == [layouts.random() for _ in range(3)]

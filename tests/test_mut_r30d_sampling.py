"""Mutation round 30 (helper d): ``imgalign.sampling.generate_folder`` given a batch size under 1 samples one image
per pipeline call, as ``generate_images`` does (mutant: ``max(1, batch_size)`` dropped, a ValueError of range()'s
zero step)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from PIL import Image

from imgalign.sampling import generate_folder, generate_images, image_seed


def test_a_batch_size_under_one_samples_one_image_per_call(tmp_path):
    seen: list[list[int]] = []

    def pipe(prompt: list[str], generator: list[Any], **kw: Any) -> SimpleNamespace:
        seen.append([g.initial_seed() for g in generator])
        return SimpleNamespace(images=[Image.new("RGB", (4, 4)) for _ in prompt])

    metas = [{"tag": "single_object", "include": [{"class": "cat", "count": 1}], "prompt": "cat"}]
    generate_folder(pipe, metas, tmp_path, 2, 5, progress=False, batch_size=0, sample=generate_images)
    assert seen == [[image_seed(5, 0, 0)], [image_seed(5, 0, 1)]]
    assert sorted(p.name for p in (tmp_path / "00000" / "samples").iterdir()) == ["0000.png", "0001.png"]

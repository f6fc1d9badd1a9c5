"""A component folder of weight shards without its index is named before any component loads also when the set's
first shard is missing too (any shard stands for its set): only a set holding its -00001- shard was caught, and
one without it was let through to the loader, which failed after the other components had loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.pipelines import missing_shards


@pytest.mark.parametrize(
    "files",
    [
        [
            "diffusion_pytorch_model-00001-of-00002.safetensors",
            "diffusion_pytorch_model-00002-of-00002.safetensors",
        ],
        ["diffusion_pytorch_model-00002-of-00002.safetensors"],
        [
            "diffusion_pytorch_model-00003-of-00003.safetensors",
            "diffusion_pytorch_model-00002-of-00003.safetensors",
        ],
    ],
)
def test_shards_without_their_index_name_the_index(tmp_path: Path, files: list[str]) -> None:
    part = tmp_path / "transformer"
    part.mkdir()
    for name in files:
        (part / name).write_bytes(b"\0")
    assert missing_shards(part) == ["transformer/diffusion_pytorch_model.safetensors.index.json"]


def test_a_file_that_only_looks_like_a_shard_in_part_is_no_shard(tmp_path: Path) -> None:
    (tmp_path / "model-of-x.safetensors").write_bytes(b"\0")
    (tmp_path / "diffusion_pytorch_model.safetensors").write_bytes(b"\0")
    assert missing_shards(tmp_path) == []

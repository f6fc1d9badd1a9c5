"""pipelines.missing_shards reads a file as a shard only when its whole name is ``<set>-<digits>-of-<digits>
.safetensors`` (round 30j survivors: ``search`` for ``fullmatch``, and ``\\d*`` for ``\\d+`` in SHARD_RE)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.pipelines import missing_shards


@pytest.mark.parametrize(
    "name",
    [
        "model--of-.safetensors",  # no shard number, no count
        "model-00001-of-.safetensors",  # no count
        "model-00001-of-00002.safetensors.old.safetensors",  # a shard's name with more after it
    ],
)
def test_a_name_that_is_no_whole_shard_name_asks_for_no_index(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_bytes(b"\0")
    assert missing_shards(tmp_path) == []


def test_a_shard_name_is_still_read_as_one_beside_those(tmp_path: Path) -> None:
    (tmp_path / "model-00001-of-00002.safetensors.old.safetensors").write_bytes(b"\0")
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"\0")
    assert missing_shards(tmp_path) == [f"{tmp_path.name}/model.safetensors.index.json"]

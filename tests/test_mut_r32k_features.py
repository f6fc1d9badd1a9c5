"""Mutation round 32k: rewards/features.files_stamp, the cache stamp of an encoder's local folder or file."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.rewards.features import files_stamp


def test_a_folders_stamp_holds_its_own_files_not_a_subfolder(tmp_path: Path) -> None:
    """The loaders read the folder's own weights and configs: a subfolder (and what is written below it) is no
    part of the stamp, so writing there does not rebuild the encoder."""
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.bin").write_bytes(b"12")
    assert [(n, size) for n, size, _ in files_stamp(f"dinov2:{tmp_path}")] == [("config.json", 2)]


@pytest.mark.parametrize("name", ["stats", "shapes-clip"])
def test_a_built_in_name_is_not_stamped_by_a_file_of_that_name(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name without a kind is a built-in encoder, not a path, though the working folder holds one so
    named."""
    (tmp_path / name).mkdir()
    (tmp_path / name / "w.bin").write_bytes(b"1")
    monkeypatch.chdir(tmp_path)
    assert files_stamp(name) == ()

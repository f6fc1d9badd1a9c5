"""Mutation round 23b (stop 60): imgalign.files leaves a published folder's subfolders as they are."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from imgalign.files import open_mode


def mode(p: Path) -> int:
    return stat.S_IMODE(os.stat(p, follow_symlinks=False).st_mode)


def test_publishing_a_folder_gives_its_files_opens_mode_and_leaves_its_subfolders_enterable(
    tmp_path: Path,
) -> None:
    """A checkpoint folder with a ``transformer/`` subfolder: the files get 0o666 less the umask, the subfolders
    keep their mode (a folder given a file's 0o644 can no longer be entered, even by its owner)."""
    sub = tmp_path / "ckpt" / "transformer"
    sub.mkdir(parents=True)
    sub.chmod(0o755)
    (sub / "model.safetensors").write_bytes(b"w")
    os.chmod(sub / "model.safetensors", 0o600)
    old = os.umask(0o022)
    try:
        open_mode(tmp_path / "ckpt")
    finally:
        os.umask(old)
    assert mode(sub) == 0o755
    assert mode(sub / "model.safetensors") == 0o644
    assert (sub / "model.safetensors").read_bytes() == b"w"


def test_a_non_ascii_name_whose_temporary_name_is_too_long_in_bytes_is_written(tmp_path: Path) -> None:
    """NAME_MAX counts bytes: a name of 127 characters but 253 bytes (accented letters take 2) fits, its
    ``.NAME.tmp`` of 132 characters does not (258 bytes), so the hashed temporary name is used and the write
    succeeds instead of failing with "File name too long"."""
    from imgalign.files import NAME_MAX, atomic_write_text, temporary_name

    name = "é" * 126 + "x"
    assert len(name) == 127 and len(name.encode()) == 253
    tmp = temporary_name(tmp_path / name)
    assert len(tmp.name.encode()) <= NAME_MAX and tmp.parent == tmp_path and tmp.name.startswith(".")
    atomic_write_text(tmp_path / name, "done")
    assert (tmp_path / name).read_text() == "done"
    assert [p.name for p in tmp_path.iterdir()] == [name]
    # two such names written at once in one folder must not share a temporary file
    assert temporary_name(tmp_path / ("é" * 126 + "y")) != tmp

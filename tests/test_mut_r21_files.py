"""imgalign.files: the umask read, links in a published folder and the temporary name's limits (mutation round 21)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from imgalign import files
from imgalign.files import NAME_MAX, open_mode, temporary_name


def mode(p: Path) -> int:
    return stat.S_IMODE(os.stat(p, follow_symlinks=False).st_mode)


def test_the_portable_umask_read_leaves_the_processs_umask_as_it_was(monkeypatch) -> None:
    """Without /proc (macOS, a sandbox) the umask is read by setting it: it must be set back, or every file the
    process creates afterwards is world-writable (umask 0)."""
    real = Path.read_text

    def no_proc(self: Path, *args, **kwargs) -> str:
        if str(self).startswith("/proc/"):
            raise OSError(2, "No such file or directory")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", no_proc)
    old = os.umask(0o027)
    try:
        assert files._umask() == 0o027
        assert os.umask(0o027) == 0o027  # (still set: the read put it back)
    finally:
        os.umask(old)


def test_a_link_in_a_published_folder_leaves_the_file_it_points_to_alone(tmp_path: Path) -> None:
    """A model folder may link to a file elsewhere (a shared tokenizer, a read-only cache): publishing the folder
    gives its own files open()'s mode, not the linked file outside it."""
    outside = tmp_path / "shared.json"
    outside.write_text("{}")
    os.chmod(outside, 0o600)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "weights.safetensors").write_text("w")
    os.chmod(folder / "weights.safetensors", 0o600)
    (folder / "tokenizer.json").symlink_to(outside)
    old = os.umask(0o022)
    try:
        open_mode(folder)
    finally:
        os.umask(old)
    assert mode(folder / "weights.safetensors") == 0o644
    assert mode(outside) == 0o600


@pytest.mark.parametrize("length", [NAME_MAX - 5, NAME_MAX - 4])
def test_a_name_whose_temporary_name_just_fits_keeps_its_readable_form(tmp_path: Path, length: int) -> None:
    """``.NAME.tmp`` adds 5 bytes: a NAME of up to 250 bytes keeps that form (at 255 bytes, the limit, exactly),
    a longer one gets a hashed name that is still a hidden ``.tmp`` file of at most NAME_MAX bytes."""
    path = tmp_path / ("a" * length)
    tmp = temporary_name(path)
    if length + 5 <= NAME_MAX:
        assert tmp.name == f".{path.name}.tmp"
    else:
        assert tmp.name != f".{path.name}.tmp"
    assert tmp.name.startswith(".") and tmp.name.endswith(".tmp") and len(tmp.name.encode()) <= NAME_MAX
    files.atomic_write_text(path, "x")
    assert path.read_text() == "x" and [p.name for p in tmp_path.iterdir()] == [path.name]

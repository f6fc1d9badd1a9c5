"""Mutation round 30k: which errors `imgalign.files.replacing` renames to the file being written, and which it
leaves as they are."""

import errno

import pytest

from imgalign.files import replacing


def test_an_error_naming_only_the_hidden_temporary_names_the_file_instead(tmp_path):
    """Creating the temporary on a disk out of room (or inodes) fails at the open, naming the hidden
    ``.NAME.PID-XXXX.tmp`` as the only file: the line named that, not the file being written."""
    target = tmp_path / "config.yaml"
    with pytest.raises(OSError) as e, replacing(target) as tmp:
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp))
    assert e.value.filename == str(target)
    assert str(e.value) == f"[Errno 28] No space left on device: {str(target)!r}"
    assert list(tmp_path.iterdir()) == []


def test_an_error_without_an_errno_keeps_the_library_text(tmp_path):
    """A library's OSError that is no OS error (PIL's "cannot write mode RGBA as JPEG") has no errno: given a
    file name, its text became "[Errno None] None: 'FILE'"."""
    with pytest.raises(OSError) as e, replacing(tmp_path / "a.jpg"):
        raise OSError("cannot write mode RGBA as JPEG")
    assert e.value.filename is None
    assert str(e.value) == "cannot write mode RGBA as JPEG"
    assert list(tmp_path.iterdir()) == []


def test_a_second_name_other_than_the_temporary_is_kept(tmp_path):
    """Only the hidden temporary is replaced by the file's name: an error about two other files keeps both."""
    with pytest.raises(OSError) as e, replacing(tmp_path / "b.txt"):
        raise OSError(errno.EXDEV, "Invalid cross-device link", "/src/a", None, "/other/b")
    assert (e.value.filename, e.value.filename2) == ("/src/a", "/other/b")

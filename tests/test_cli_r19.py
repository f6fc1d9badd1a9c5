"""Round 19 (mutation round, stop 56): cli.py's name-too-long line counts bytes, not characters, and a name of
exactly 255 bytes is one the file systems take."""

from __future__ import annotations

from imgalign.cli import name_too_long_message


def test_a_name_too_long_is_measured_in_bytes_not_characters():
    """200 two-byte characters are 400 bytes: over the 255-byte limit, though only 200 characters."""
    msg = name_too_long_message("é" * 200)
    assert f"path '{'é' * 60}...{'é' * 12}' is too long" in msg
    assert "(a folder or file name of 400 bytes; most file systems take at most 255 bytes per name)" in msg


def test_a_path_of_two_byte_characters_is_measured_in_bytes():
    name = "é/" * 1400 + "x"  # 2801 characters, 4201 bytes
    assert "(the whole path is 4201 bytes; most systems take at most 4096 bytes in a path)" in (
        name_too_long_message(name)
    )


def test_a_255_byte_name_is_within_the_limit_so_the_whole_path_is_named():
    name = "/".join(["b" * 255] * 17)  # every name at the limit, 4351 bytes in all
    msg = name_too_long_message(name)
    assert (
        "(the whole path is 4351 bytes; most systems take at most 4096 bytes in a path): give a shorter path"
        in msg
    )
    assert "a folder or file name of" not in msg

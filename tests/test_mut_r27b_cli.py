"""Mutation round 27 (cli.py): behaviour the earlier tests let a mutant change unseen."""

from __future__ import annotations

import pytest

from imgalign.cli import main, name_too_long_message


def test_a_name_of_at_most_80_characters_is_shown_whole() -> None:
    """The line shortens only a name over 80 characters: 80 four-byte characters (320 bytes, over the limit) are
    shown whole, 81 are cut to their first 60 and last 12."""
    short, long = "\U0001f600" * 80, "\U0001f600" * 81
    assert f"path {short!r} is too long" in name_too_long_message(short)
    assert "(a folder or file name of 320 bytes;" in name_too_long_message(short)
    assert f"path '{long[:60]}...{long[-12:]}' is too long" in name_too_long_message(long)


def test_an_unknown_option_somewhat_like_one_is_hinted(capsys: pytest.CaptureFixture[str]) -> None:
    """The hint takes a close option, not only a one-letter slip: --outdir (similarity 0.8) is --output-dir."""
    with pytest.raises(SystemExit) as e:
        main(["train", "--outdir", "x"])
    assert e.value.code == 2
    assert "(--outdir: did you mean --output-dir?)" in capsys.readouterr().err


def test_a_too_long_name_that_is_not_utf8_is_measured_in_its_bytes() -> None:
    """A name read back from the file system with bytes that are not UTF-8 (os.fsdecode's surrogates) failed
    str.encode() inside the message for ENAMETOOLONG, a UnicodeEncodeError in place of the line; its bytes count."""
    import os

    from imgalign.cli import name_too_long_message

    name = os.fsdecode(b"caf\xe9" + b"a" * 300)
    assert "a folder or file name of 304 bytes" in name_too_long_message(name)
    assert "the whole path is 4100 bytes" in name_too_long_message(
        os.fsdecode(b"/\xe9" + b"/aaaaaaa" * 512 + b"aa")
    )

"""Mutation round 25 (cli.py): behaviour the earlier tests let a mutant change unseen."""

from __future__ import annotations

import pytest

from imgalign.cli import main


def test_an_unknown_option_given_with_a_long_value_is_still_hinted_by_its_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--rewards=geneval:mode=strict`: the hint compares the option part only; the whole token is too far from
    --reward for difflib and got no hint."""
    argv = ["score", "x", "--reward", "geneval", "--out", "o.jsonl", "--rewards=geneval:mode=strict"]
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --rewards=geneval:mode=strict (--rewards: did you mean --reward?)" in err


def test_a_name_too_long_error_without_a_file_name_is_one_line_naming_no_path(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A command's ENAMETOOLONG that carries no file name (an OSError raised by hand, a library's own) is the line
    for "a path given", exit 2: its missing name was read as the path 'None'."""
    import argparse
    import errno

    from imgalign.cli import _run

    def handler(args: argparse.Namespace) -> int:
        raise OSError(errno.ENAMETOOLONG, "File name too long")

    args = argparse.Namespace(command="score", verbose=False, func=handler)
    assert _run(args) == 2
    err = capsys.readouterr().err
    assert err == (
        "imgalign score: error: a path given is too long for the file system (most take at most 255 bytes per "
        "folder or file name, 4096 in a path): give a shorter one\n"
    )


def test_version_names_the_program(capsys: pytest.CaptureFixture[str]) -> None:
    """`imgalign --version` prints "imgalign X.Y.Z" and exits 0."""
    from imgalign import __version__

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == f"imgalign {__version__}\n"


def test_the_hints_of_two_unknown_options_are_separated_by_a_semicolon(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each unknown option gets its own hint, the hints joined by "; " (a ", " read as part of one hint)."""
    argv = ["score", "x", "--reward", "geneval", "--out", "o.jsonl", "--rewards", "y", "--batch_size", "2"]
    with pytest.raises(SystemExit):
        main(argv)
    assert (
        "unrecognized arguments: --rewards y --batch_size 2 (--rewards: did you mean --reward?; --batch_size: did "
        "you mean --batch-size?)"
    ) in capsys.readouterr().err

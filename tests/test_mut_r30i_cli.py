"""Mutation round 30i: cli._Parser.error's '-'-word hint is given only for a word argparse read as an unknown
option, and only on the errors that word can cause."""

from __future__ import annotations

import pytest

from imgalign.cli import main


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "word",
    [
        "-",  # stdin's name: argparse takes it as a positional
        "-a b.png",  # a word with a space is never an option to argparse
        "-1",  # negative numbers are values to argparse
        "-.5",
        "-1.5",
    ],
)
def test_a_dash_word_argparse_takes_as_a_path_gets_no_hint(
    word: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _error(["score", word, "--out", "s.jsonl"], capsys)
    assert err.endswith("the following arguments are required: --reward")


def test_an_unknown_long_option_gets_no_dash_hint(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(["score", "a.png", "--reward", "clip", "--out", "s.jsonl", "--bogus"], capsys)
    assert err.endswith("unrecognized arguments: --bogus")


def test_a_known_short_option_gets_no_dash_hint(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(["-v"], capsys)
    assert err.endswith("the following arguments are required: COMMAND")


def test_another_error_gets_no_dash_hint(capsys: pytest.CaptureFixture[str]) -> None:
    """The hint is for 'required' and 'unrecognized' errors: a bad --batch-size is not about '-b.png'."""
    argv = ["score", "a.png", "-b.png", "--reward", "clip", "--out", "s.jsonl", "--batch-size", "abc"]
    assert _error(argv, capsys).endswith("argument --batch-size: invalid int value: 'abc'")


def test_the_value_hint_names_the_word_after_the_option_not_another_dash_word(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`score -a.png --out -s.jsonl` was told to give --out=-a.png: the image as the output file."""
    err = _error(["score", "-a.png", "--reward", "clip", "--out", "-s.jsonl"], capsys)
    assert err.endswith(
        "argument --out: expected one argument (a value that begins with '-', such as '-s.jsonl', is read as an "
        "option: give it as --out=-s.jsonl)"
    )


def test_an_option_with_no_value_at_the_end_gets_no_value_hint(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(["score", "-a.png", "--reward", "clip", "--out"], capsys)
    assert err.endswith("argument --out: expected one argument")


def test_a_shortened_option_is_followed_to_its_value(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(["score", "-a.png", "--reward", "clip", "--ou", "-s.jsonl"], capsys)
    assert err.endswith("give it as --out=-s.jsonl)")


@pytest.mark.parametrize(
    "argv",
    [
        ["score", "a.png", "--out", "--reward", "clip"],  # a known option after --out is no value of it
        ["score", "--reward", "clip", "--out", "--", "-a.png"],  # '--' is no shortened option
    ],
)
def test_no_value_hint_where_no_unknown_dash_word_follows_the_option(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _error(argv, capsys).endswith("argument --out: expected one argument")


@pytest.mark.parametrize(
    "argv",
    [
        ["score", "a.png", "--reward", "clip", "--out", "s.jsonl", "-v"],
        ["rewards", "list", "-v"],  # a nested subcommand: -v is the outermost parser's
    ],
)
def test_imgalign_s_own_v_after_the_command_is_not_hinted_as_a_file(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`score ... -v` was told to give a file that begins with '-' as ./-v: -v is imgalign's --verbose."""
    command = " ".join(argv[:2]) if argv[0] == "rewards" else argv[0]
    assert _error(argv, capsys).endswith(
        f"unrecognized arguments: -v (-v is imgalign's own option: give it before the command, imgalign -v {command} ...)"
    )

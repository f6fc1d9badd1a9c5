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

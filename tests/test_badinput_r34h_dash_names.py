"""Bad-input round 34h: file names and values that begin with '-' (argparse reads them as options)."""

from __future__ import annotations

import pytest

from imgalign.cli import main


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_an_image_that_begins_with_a_dash_is_told_how_to_give(capsys: pytest.CaptureFixture[str]) -> None:
    """`score -a.png` said "the following arguments are required: paths", though a path was given."""
    err = _error(["score", "-a.png", "--reward", "clip", "--out", "s.jsonl"], capsys)
    assert "required: paths ('-a.png' begins with '-', so it is read as an option" in err
    assert "as ./-a.png" in err


def test_a_second_image_that_begins_with_a_dash_is_told_how_to_give(
    capsys: pytest.CaptureFixture[str],
) -> None:
    err = _error(["score", "a.png", "-b.png", "--reward", "clip", "--out", "s.jsonl"], capsys)
    assert "unrecognized arguments: -b.png ('-b.png' begins with '-'" in err and "./-b.png" in err


def test_an_out_that_begins_with_a_dash_is_told_how_to_give(capsys: pytest.CaptureFixture[str]) -> None:
    """`--out -s.jsonl` was argparse's bare "argument --out: expected one argument"."""
    err = _error(["score", "a.png", "--reward", "clip", "--out", "-s.jsonl"], capsys)
    assert err.endswith(
        "argument --out: expected one argument (a value that begins with '-', such as '-s.jsonl', is read as an "
        "option: give it as --out=-s.jsonl)"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["score", "a.png", "--out", "s.jsonl"],  # no --reward, and no word with a dash but options
        ["score", "a.png", "--reward", "clip", "--out"],
        ["grid", "--model", "a=shapes", "--prompt", "x", "--out", "g.png", "--dtype"],
    ],
)
def test_no_dash_hint_without_a_word_that_begins_with_a_dash(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert "begins with '-'" not in _error(argv, capsys)

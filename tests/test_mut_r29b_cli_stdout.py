"""Mutation round 29 (helper b): ``imgalign.cli._escape_unencodable`` changes only a strict stdout that can be
reconfigured, and only for the ``imgalign`` program (``console_main``), not for an in-process ``main`` call;
and ``unknown_arguments_message`` hints an unknown ``--option=value`` by the option alone."""

from __future__ import annotations

import io
import sys

import pytest

from imgalign import cli


def test_a_surrogateescape_stdout_keeps_writing_the_names_own_bytes() -> None:
    """Python's stdout under the C/POSIX locale writes a non-UTF-8 name's own bytes back; it is not made to
    escape them (only the characters its encoding cannot hold are escaped: round 33h's handler)."""
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8", errors="surrogateescape", write_through=True)
    cli._escape_unencodable(stream)
    assert stream.errors == cli._BYTES_OR_ESCAPED
    stream.write("x\udce9\n")
    assert raw.getvalue() == b"x\xe9\n"


class _StrictWithoutReconfigure:
    errors = "strict"

    def write(self, text: str) -> int:
        return len(text)


def test_a_strict_stream_that_cannot_be_reconfigured_is_left_as_it_is() -> None:
    stream = _StrictWithoutReconfigure()
    cli._escape_unencodable(stream)  # no AttributeError
    assert stream.errors == "strict"


def test_an_in_process_main_call_keeps_the_callers_strict_stdout(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True)
    monkeypatch.setattr(sys, "stdout", stream)
    assert cli.main(["rewards", "list"]) == 0
    assert stream.errors == "strict"
    assert b"geneval" in raw.getvalue()


def test_an_unknown_option_with_its_value_is_hinted_by_the_option_alone() -> None:
    """`--output_dir=runs/a_long_run_name`: the option is matched and named by its part before `=`, not with
    its value (with the value, the match fell below the cutoff and the hint was lost)."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir")
    said = cli.unknown_arguments_message(["--output_dir=runs/a_long_run_name"], parser)
    assert said == (
        "unrecognized arguments: --output_dir=runs/a_long_run_name (--output_dir: did you mean --output-dir?)"
    )

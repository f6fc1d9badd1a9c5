"""The C locale without UTF-8 mode (``LC_ALL=C PYTHONUTF8=0``): Python's stdout is ASCII with surrogateescape, so
a file name's undecodable bytes print as those bytes, but any other non-ASCII character failed the print:
`imgalign rewards list` stopped at "Fréchet" with "'ascii' codec can't encode character '\\xe9'" and exit status 2."""

from __future__ import annotations

import io
import sys

from imgalign import cli


def _c_locale_stdout() -> tuple[io.BytesIO, io.TextIOWrapper]:
    raw = io.BytesIO()
    return raw, io.TextIOWrapper(raw, encoding="ascii", errors="surrogateescape", write_through=True)


def test_rewards_list_prints_every_reward_with_the_accent_escaped(monkeypatch) -> None:
    raw, stdout = _c_locale_stdout()
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setattr(sys, "argv", ["imgalign", "rewards", "list"])
    assert cli.console_main() == 0
    lines = raw.getvalue().decode("ascii").splitlines()
    assert any(line.startswith("fid ") and "Fr\\xe9chet-distance" in line for line in lines)
    assert lines[-1].startswith("vlm_loglik ")  # the list is whole


def test_a_file_names_bytes_still_print_as_those_bytes() -> None:
    raw, stdout = _c_locale_stdout()
    cli._escape_unencodable(stdout)
    name = b"r\xe9".decode("ascii", "surrogateescape")  # as Python reads that name in this locale
    print(f"wrote {name} for caf\u00e9", file=stdout)
    assert raw.getvalue() == b"wrote r\xe9 for caf\\xe9\n"

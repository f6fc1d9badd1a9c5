"""Round 20 mutation tests for imgalign/cli.py (stop 57)."""

from __future__ import annotations

import argparse

from imgalign.cli import _show_defaults


def test_an_option_without_help_gets_its_default_shown_unless_it_has_none_worth_showing() -> None:
    """A subcommand's option without a help text of its own gets ``(default: X)`` as its help, but not for a
    default of None, False or an empty list: those printed "(default: None)" under a bare option name. (No
    option of today's CLI is helpless with such a default, so a synthetic parser pins it; C08.)"""
    parser = argparse.ArgumentParser(prog="imgalign")
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("thing")
    p.add_argument("--bare")  # default None
    p.add_argument("--flag", action="store_true")  # default False
    p.add_argument("--many", nargs="*", default=[])
    p.add_argument("--count", type=int, default=3)
    _show_defaults(parser)
    text = " ".join(p.format_help().split())
    assert "(default: None)" not in text
    assert "(default: False)" not in text
    assert "(default: [])" not in text
    assert "--count COUNT (default: 3)" in text

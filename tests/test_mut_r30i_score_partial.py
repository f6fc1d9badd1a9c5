"""Mutation round 30i: score.partial_path keeps the readable '.NAME.partial.jsonl' up to the file system's 255
bytes, and counts bytes, not characters."""

from __future__ import annotations

from pathlib import Path

from imgalign.commands.score import partial_path


def test_a_partial_name_of_exactly_255_bytes_is_kept_readable() -> None:
    out = Path("runs") / ("a" * 236 + ".csv")  # 240 bytes: '.' + 240 + '.partial.jsonl' is 255
    assert partial_path(out) == Path("runs") / f".{out.name}.partial.jsonl"
    assert len(partial_path(out).name.encode()) == 255
    longer = Path("runs") / ("a" * 237 + ".csv")  # one byte more: hashed
    assert partial_path(longer).name != f".{longer.name}.partial.jsonl"
    assert len(partial_path(longer).name.encode()) <= 255


def test_a_non_ascii_out_name_is_measured_in_bytes() -> None:
    """120 'é' are 240 bytes in UTF-8 (the file system's measure), though 120 characters."""
    out = Path("runs") / ("é" * 120 + ".csv")
    name = partial_path(out).name
    assert name.startswith(".") and name.endswith(".partial.jsonl")
    assert len(name.encode()) <= 255

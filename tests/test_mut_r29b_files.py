"""Mutation round 29 (helper b): ``imgalign.files.temporary_name`` keeps the write's tag in the hashed name of
a long file name, so two writes of one such file at once (two commands with one --out) get temporary files of
their own, as they do for a short name."""

from __future__ import annotations

import os
from pathlib import Path

from imgalign.files import NAME_MAX, replacing, temporary_name


def test_two_writes_of_one_long_name_have_temporary_names_of_their_own(tmp_path: Path) -> None:
    path = tmp_path / ("r" * 250 + ".csv")
    a, b = temporary_name(path, "1-aa"), temporary_name(path, "2-bb")
    assert a != b and a.parent == b.parent == tmp_path
    assert a.name.endswith(".1-aa.tmp") and b.name.endswith(".2-bb.tmp")
    assert max(len(os.fsencode(a.name)), len(os.fsencode(b.name))) <= NAME_MAX
    with replacing(path) as first, replacing(path) as second:  # nested: both open at once
        assert first != second
        first.write_text("1")
        second.write_text("2")
    assert path.read_text() == "1" and sorted(p.name for p in tmp_path.iterdir()) == [path.name]

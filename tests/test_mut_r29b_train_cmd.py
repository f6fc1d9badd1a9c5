"""Mutation round 29 (helper b): ``imgalign.commands.train.other_commands_output`` reads its marker names as
files: a run folder holding a folder that happens to be named ``config.json`` (or another marker) is still a
run folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.commands.train import OTHER_OUTPUTS, other_commands_output


@pytest.mark.parametrize("name", [name for name, _ in OTHER_OUTPUTS])
def test_a_folder_named_like_a_marker_file_is_no_other_commands_output(tmp_path: Path, name: str) -> None:
    (tmp_path / name).mkdir()
    assert other_commands_output(tmp_path) is None
    (tmp_path / name).rmdir()
    (tmp_path / name).write_text("{}")
    assert f"({name})" in other_commands_output(tmp_path)

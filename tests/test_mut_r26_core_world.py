"""Mutation round 26 (helper C): behaviour of imgalign.commands.world that no test pinned."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.cli import main
from imgalign.commands import world


def test_two_jobs_for_one_component_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """--jobs 2, the smallest count above one, is refused for one component as --jobs 3 is (one component trains
    in one process). With the check at `jobs > 2`, --jobs 2 was taken and ignored without a word, and the
    component trained in one process all the same."""
    trained = []
    monkeypatch.setattr(
        world, "_pretrain_one", lambda module, cfg, out, progress: trained.append(module) or {}
    )
    argv = ["world", "pretrain", "--component", "clip", "--out", str(tmp_path / "p"), "--no-progress"]
    assert main([*argv, "--jobs", "2"]) == 2
    err = capsys.readouterr().err
    assert "--jobs 2 is how many components train at once (with --component all)" in err
    assert trained == [] and not (tmp_path / "p").exists()

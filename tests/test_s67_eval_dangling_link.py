"""`eval --images` of a layout whose sample is a symlink to a file that is gone (a dataset of links on a disk that
is not mounted) said only "[Errno 2] No such file or directory: '<the link>'": now that it is a broken link, where it
points, and what to do (as `score` names such links)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign import shapes as W
from imgalign.cli import main
from imgalign.eval.suite import write_prompt_folder


def test_a_sample_that_is_a_broken_link_is_named_with_its_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = W.single_object("circle")
    gen = tmp_path / "gen"
    write_prompt_folder(gen, 0, spec.to_metadata(), [])
    link = gen / "00000" / "samples" / "0000.png"
    link.symlink_to(tmp_path / "gone.png")
    argv = ["eval", "--images", str(gen), "--no-progress", "--out", str(tmp_path / "ev")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        f"{link} is a symlink whose target does not exist ({tmp_path / 'gone.png'}): restore or mount its target, "
        "or remove the link"
    ) in err

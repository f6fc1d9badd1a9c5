"""Mutation round 27i: `imgalign eval` lets go of its --out folder's lock when it ends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from imgalign.cli import main
from imgalign.eval.suite import write_prompt_folder


def _other_process_can_lock(folder: Path) -> bool:
    code = (
        "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY)\n"
        "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError:\n    sys.exit(1)"
    )
    return subprocess.run([sys.executable, "-c", code, str(folder)]).returncode == 0


def test_an_eval_that_ended_leaves_its_out_folder_to_the_next(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock taken by claim_out_folder is let go when run_eval returns (a notebook or script that runs one
    evaluation after another in one process, then another process evaluating into the folder, is not refused),
    and when it fails."""
    pytest.importorskip("fcntl")
    images = tmp_path / "gen"
    meta = {
        "tag": "single_object",
        "include": [{"class": "square", "count": 1}],
        "prompt": "a photo of a square",
    }
    write_prompt_folder(images, 0, meta, [Image.new("RGB", (64, 64), (255, 255, 255))])
    out = tmp_path / "ev"
    assert main(["eval", "--images", str(images), "--out", str(out), "--no-progress"]) == 0
    assert (out / "summary.json").is_file() and _other_process_can_lock(out)

    def fail(*a: object, **k: object) -> None:  # fails after the claim
        raise OSError("disk full")

    monkeypatch.setattr("imgalign.commands.evaluate.refresh_copy", fail)
    assert main(["eval", "--images", str(images), "--out", str(tmp_path / "ev2"), "--no-progress"]) != 0
    capsys.readouterr()
    assert (tmp_path / "ev2" / "eval_args.json").is_file() and _other_process_can_lock(tmp_path / "ev2")

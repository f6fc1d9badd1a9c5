"""Bad-input round 30: `imgalign train --resume` of a checkpoint that is already at train.max_steps, into a new
output folder (nothing to train there)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.cli import main
from imgalign.trainers.testing import one_step_config, write_config


def test_a_resume_that_trains_no_step_does_not_point_to_a_report_it_cannot_make(
    sd3_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`train C --resume RUN/checkpoints/step-000001 --output-dir NEW --max-steps 1` warned "nothing to train",
    then printed "done: NEW" and "curves and a summary: imgalign report NEW", a command that then refused NEW
    ("metrics.jsonl does not exist"). It now says no step was trained."""
    run = tmp_path / "run"
    path = write_config(one_step_config(sd3_dir, run), tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0
    capsys.readouterr()
    new = tmp_path / "new"
    ckpt = run / "checkpoints" / "step-000001"
    assert (
        main(["train", str(path), "--resume", str(ckpt), "--output-dir", str(new), "--max-steps", "1"]) == 0
    )
    printed = capsys.readouterr().out
    assert printed == f"done: {new}\n  no step trained, so no metrics to report\n"
    assert not (new / "metrics.jsonl").exists()
    assert main(["report", str(new)]) == 2  # the command the old line named refuses the folder

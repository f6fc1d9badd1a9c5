"""Bad-input round 24: `imgalign train --resume` of a run whose metrics.jsonl no longer reaches its checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from imgalign.cli import main
from imgalign.trainers.testing import metric_rows, one_step_config, write_config
from imgalign.trainers.trainer import missing_log_rows

torch.set_num_threads(1)


def test_missing_log_rows_names_the_steps_a_log_lacks_before_the_checkpoint() -> None:
    assert missing_log_rows([1, 2, 3], 3, True) is None
    assert missing_log_rows([1, 2, 3, 4, 5], 3, True) is None  # rows past it are cut back, not missing
    assert (
        missing_log_rows([11, 12], 12, True) is None
    )  # a run begun from another folder's step-10 checkpoint
    assert missing_log_rows([1, 2], 3, True) == (
        "resuming from step 3, but its rows end at step 2 (cut, replaced or deleted since the checkpoint was "
        "written): step 3 will be missing from the log and from the curves of `imgalign report` (to keep them, "
        "stop this run, put back the run's own metrics.jsonl and resume again)"
    )
    assert missing_log_rows([1, 7], 5, True).startswith(  # type: ignore[union-attr]
        "resuming from step 5, but its rows end at step 1 (cut, replaced or deleted since the checkpoint was "
        "written): steps 2 to 5 will be missing"
    )
    assert "but it holds no rows (" in missing_log_rows([], 2, True)  # type: ignore[operator]
    assert "but it is not there (" in missing_log_rows([], 2, False)  # type: ignore[operator]


def test_a_resume_whose_metrics_log_ends_before_its_checkpoint_says_which_steps_it_lacks(
    sd3_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run logs each step before it saves, so a metrics.jsonl that stops before the checkpoint was cut, replaced
    or deleted since; the resume went on without a word and the log had a gap (steps 1 and 3 of 3). It is named
    now, with the steps lost; a whole log gives no word."""
    out = tmp_path / "run"
    cfg = one_step_config(sd3_dir, out, log={"checkpoint_every": 1, "keep_last": 3})
    cfg["train"]["max_steps"] = 2
    path = write_config(cfg, tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0
    whole = (out / "metrics.jsonl").read_text()
    (out / "metrics.jsonl").write_text(whole.splitlines(keepends=True)[0])  # step 1 only
    with caplog.at_level("WARNING", logger="imgalign.trainers.trainer"):
        assert main(["train", str(path), "--resume", "auto", "--max-steps", "3"]) == 0
    said = [r.getMessage() for r in caplog.records if "metrics.jsonl" in r.getMessage()]
    assert said == [
        f"{out / 'metrics.jsonl'}: resuming from step 2, but its rows end at step 1 (cut, replaced or deleted since "
        "the checkpoint was written): step 2 will be missing from the log and from the curves of `imgalign report` "
        "(to keep them, stop this run, put back the run's own metrics.jsonl and resume again)"
    ]
    assert [r["step"] for r in metric_rows(out)] == [1, 3]
    caplog.clear()
    with caplog.at_level("WARNING", logger="imgalign.trainers.trainer"):
        assert main(["train", str(path), "--resume", "auto", "--max-steps", "4"]) == 0
    assert not [r for r in caplog.records if "metrics.jsonl" in r.getMessage()]

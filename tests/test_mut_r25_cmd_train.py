"""Mutation round 25 (commands/train.py): behaviour the earlier tests let a mutant change unseen."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.commands.train import default_config_resume


def test_resume_of_the_default_configs_own_run_given_absolutely_is_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`imgalign train --resume /abs/runs/flow_grpo/checkpoints/step-N` without CONFIG continues the default's own
    folder (log.output_dir runs/flow_grpo, relative): the same folder written two ways is not "another run"."""
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "runs" / "flow_grpo"
    (run / "checkpoints" / "step-000002").mkdir(parents=True)
    (run / "config.yaml").write_text("train: {}\n")
    assert default_config_resume(str(run / "checkpoints" / "step-000002"), "runs/flow_grpo") is None
    other = tmp_path / "runs" / "other"
    (other / "checkpoints").mkdir(parents=True)
    (other / "config.yaml").write_text("train: {}\n")
    assert "not continue" in (default_config_resume(str(other), "runs/flow_grpo") or "")

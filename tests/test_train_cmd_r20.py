"""``imgalign train`` command behaviour the earlier tests left unpinned (mutation round 20); the trainer is stubbed."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.cli import main


def test_resume_auto_without_config_from_inside_a_run_folder_is_not_taken_for_a_resume_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The no-CONFIG refusal of `--resume RUN` reads a path; `--resume auto` is no path, also where the working
    folder is a run folder with its config (read as one, "auto"'s parent "." was that run and the run was refused)."""
    import imgalign.trainers.trainer as trainer

    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "config.yaml").write_text("train:\n  max_steps: 1\n")
    monkeypatch.chdir(tmp_path)
    started = []
    monkeypatch.setattr(trainer, "preflight", lambda cfg: None)
    monkeypatch.setattr(trainer, "run", lambda cfg, out, resume: started.append((out, resume)))
    assert main(["train", "--resume", "auto", "--max-steps", "1", "--no-progress"]) == 0
    assert started == [("runs/shapes_flow_grpo", "auto")]

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


def test_a_run_interrupted_before_its_first_checkpoint_is_a_run_folder_by_its_metrics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run folder holding metrics.jsonl and config.yaml but no checkpoints/ (stopped before its first save) is a
    run: `train RUN/config.yaml --resume auto` whose copied log.output_dir names another folder is refused."""
    import imgalign.trainers.trainer as trainer
    from imgalign.commands.train import run_folder_of

    run = tmp_path / "runs" / "b"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    (run / "config.yaml").write_text("log:\n  output_dir: runs/a\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(trainer, "preflight", lambda cfg: None)
    monkeypatch.setattr(trainer, "run", lambda cfg, out, resume: pytest.fail("trained"))
    assert main(["train", "runs/b/config.yaml", "--resume", "auto"]) == 2
    assert (
        "is the config of run folder 'runs/b', but its log.output_dir is 'runs/a'" in capsys.readouterr().err
    )
    assert run_folder_of("runs/b/metrics.jsonl") == Path("runs/b")


def test_a_resume_without_config_of_a_run_lacking_its_config_yaml_is_not_refused_with_a_config_that_is_not_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The no-CONFIG refusal offers `imgalign train RUN/config.yaml`; a run folder without config.yaml (a copy of
    its checkpoints alone) has none to offer, so its checkpoint resumes with the default's settings as asked."""
    import imgalign.trainers.trainer as trainer
    from imgalign.commands.train import run_folder_of

    (tmp_path / "runs" / "a" / "checkpoints" / "step-000001").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    started = []
    monkeypatch.setattr(trainer, "preflight", lambda cfg: None)
    monkeypatch.setattr(trainer, "run", lambda cfg, out, resume: started.append((out, resume)))
    ckpt = "runs/a/checkpoints/step-000001"
    assert run_folder_of(ckpt) is None
    assert main(["train", "--resume", ckpt, "--no-progress"]) == 0
    assert started == [("runs/shapes_flow_grpo", ckpt)]

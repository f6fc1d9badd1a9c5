"""``imgalign train`` flags the earlier tests left unpinned (mutation round 23); the trainer is stubbed."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.cli import main
from tests.conftest import two_run_folders


@pytest.mark.parametrize(
    "item",
    [
        "log.output_dir=runs/new",
        "log.output_dir = runs/new",
        " log.output_dir=runs/new",
        "log. output_dir=runs/new",
        "log={output_dir: runs/new}",
    ],
)
def test_a_set_log_output_dir_with_or_without_spaces_chooses_the_folder_as_output_dir_does(
    item: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--set log.output_dir=NEW` chooses the run folder as `--output-dir NEW` does: a resume of another run's
    checkpoint without CONFIG, or of a copied run folder's config, starts there and is not refused. Written with
    spaces (the config reads the key stripped) it was refused with "add --output-dir NEW_FOLDER", a folder the
    user had given."""
    import imgalign.trainers.trainer as trainer

    two_run_folders(tmp_path)
    monkeypatch.chdir(tmp_path)
    started = []
    monkeypatch.setattr(trainer, "preflight", lambda cfg: None)
    monkeypatch.setattr(trainer, "run", lambda cfg, out, resume: started.append((out, resume)))
    ckpt = "runs/a/checkpoints/step-000001"
    assert main(["train", "--resume", ckpt, "--set", item, "--no-progress"]) == 0
    assert main(["train", "runs/b/config.yaml", "--resume", "auto", "--set", item.replace("new", "b")]) == 0
    assert started == [("runs/new", ckpt), ("runs/b", "auto")]


def test_the_folder_check_reads_only_log_output_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Another key that ends in output_dir, or log.output_dir's value named in another key, chooses no folder: the
    resume without CONFIG is still refused."""
    two_run_folders(tmp_path)
    monkeypatch.chdir(tmp_path)
    ckpt = "runs/a/checkpoints/step-000001"
    assert main(["train", "--resume", ckpt, "--set", "log.progress=false"]) == 2
    assert "without CONFIG would train the default config's settings" in capsys.readouterr().err


def test_sets_output_dir_reads_the_key_as_the_config_does() -> None:
    from imgalign.commands.train import sets_output_dir

    assert sets_output_dir(["train.lr=1e-4", "log.output_dir=runs/x"])
    assert sets_output_dir(["log = {output_dir: runs/x, progress: false}"])
    assert not sets_output_dir([])
    assert not sets_output_dir(["log.progress=false", "log={progress: false}", "train.note=log.output_dir=x"])
    assert not sets_output_dir(["eval.output_dir=runs/x"])


def test_describe_with_a_config_alone_shows_the_configs_values(tmp_path: Path, capsys) -> None:
    """`imgalign train CONFIG --describe` (no --set or other flag) shows each key as CONFIG sets it beside its
    default, not the built-in defaults only."""
    config = tmp_path / "c.yaml"
    config.write_text("train:\n  lr: 0.002\n")
    assert main(["train", str(config), "--describe"]) == 0
    out = capsys.readouterr().out
    assert "train.lr = 0.002  (default 0.0001)\n" in out
    assert "train.max_steps = 100\n" in out  # a key the config leaves alone: its default, without a note


def test_a_config_with_a_resume_of_another_runs_checkpoint_starts_in_the_configs_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`imgalign train CONFIG --resume runs/a/checkpoints/step-N` branches run a's checkpoint into CONFIG's folder
    with CONFIG's settings: the refusal of a resume without CONFIG (it would train the default's settings) is not
    for it."""
    import imgalign.trainers.trainer as trainer

    two_run_folders(tmp_path)
    (tmp_path / "mine.yaml").write_text("log:\n  output_dir: runs/new\n")
    monkeypatch.chdir(tmp_path)
    started = []
    monkeypatch.setattr(trainer, "preflight", lambda cfg: None)
    monkeypatch.setattr(trainer, "run", lambda cfg, out, resume: started.append((out, resume)))
    ckpt = "runs/a/checkpoints/step-000001"
    assert main(["train", "mine.yaml", "--resume", ckpt, "--no-progress"]) == 0
    assert started == [("runs/new", ckpt)]


def test_resume_auto_with_another_yaml_inside_a_run_folder_is_not_taken_for_that_runs_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a run folder's own config.yaml names the run it continues: `imgalign train runs/b/tweak.yaml --resume
    auto` with tweak.yaml's log.output_dir runs/new goes on in runs/new, not refused as runs/b's copied config."""
    import imgalign.trainers.trainer as trainer

    two_run_folders(tmp_path)
    (tmp_path / "runs" / "b" / "tweak.yaml").write_text("log:\n  output_dir: runs/new\n")
    monkeypatch.chdir(tmp_path)
    started = []
    monkeypatch.setattr(trainer, "preflight", lambda cfg: None)
    monkeypatch.setattr(trainer, "run", lambda cfg, out, resume: started.append((out, resume)))
    assert main(["train", "runs/b/tweak.yaml", "--resume", "auto", "--no-progress"]) == 0
    assert started == [("runs/new", "auto")]

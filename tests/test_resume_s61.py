"""A refused resume writes nothing into its output folder (round 28's A24: a resume refused for other trainable
weights left config.until-step-N.yaml, the lineage file of a resume that never happened, in the new --output-dir)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.cli import main
from imgalign.trainers.testing import one_step_config, write_config


def test_a_resume_refused_for_other_trainable_weights_leaves_no_lineage_file(
    sd3_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    path = write_config(one_step_config(sd3_dir, out), tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0
    ckpt = out / "checkpoints" / "step-000001"
    other = ["--max-steps", "2", "--set", "model.trainable_modules=context_embedder"]
    new = tmp_path / "new"
    capsys.readouterr()
    assert main(["train", str(path), "--resume", str(ckpt), "--output-dir", str(new), *other]) == 2
    assert "was trained with other trainable weights" in capsys.readouterr().err
    assert not list(new.glob("config.until-step-*.yaml"))
    assert main(["train", str(path), "--resume", "auto", *other]) == 2  # in the run's own folder too
    assert not list(out.glob("config.until-step-*.yaml"))
    # a resume that goes on keeps the config its checkpoint was trained with, as before
    assert main(["train", str(path), "--resume", "auto", "--max-steps", "2", "--set", "train.lr=0.002"]) == 0
    assert [p.name for p in out.glob("config.until-step-*.yaml")] == ["config.until-step-000001.yaml"]


def test_the_lineage_file_of_a_step_is_never_overwritten_by_a_later_resume_from_it(
    sd3_dir: Path, tmp_path: Path
) -> None:
    """config.until-step-N.yaml, once written, stays as it is when another resume from step N goes on (the first
    copy is the run's lineage); here a new --output-dir that already holds one."""
    out = tmp_path / "run"
    path = write_config(one_step_config(sd3_dir, out), tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0
    new = tmp_path / "new"
    new.mkdir()
    keep = new / "config.until-step-000001.yaml"
    keep.write_text("first copy\n")
    ckpt = out / "checkpoints" / "step-000001"
    argv = ["train", str(path), "--resume", str(ckpt), "--output-dir", str(new), "--max-steps", "2"]
    assert main([*argv, "--set", "train.lr=0.002"]) == 0
    assert (new / "checkpoints" / "step-000002").is_dir() and keep.read_text() == "first copy\n"

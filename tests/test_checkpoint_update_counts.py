"""optimizer.pt or scheduler.pt of another step copied into a checkpoint (a hand restore from the wrong folder)
resumed without a word, with another step's Adam moments and learning-rate position: each file still reads and
fits. state.json now records how many updates each holds, and a resume refuses a file that holds another count."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from imgalign.cli import main
from imgalign.trainers.testing import one_step_config, write_config


@pytest.fixture(scope="module")
def two_step_run(sd3_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a run trained two steps by the CLI with a checkpoint after each, its config file)."""
    run = tmp_path_factory.mktemp("counts") / "run"
    cfg = one_step_config(sd3_dir, run, train={"max_steps": 2}, log={"checkpoint_every": 1, "keep_last": 2})
    config = write_config(cfg, run.parent / "c.yaml")
    assert main(["train", str(config)]) == 0
    return run, config


@pytest.mark.parametrize(
    "name, what", [("optimizer.pt", "optimizer state"), ("scheduler.pt", "learning-rate scheduler state")]
)
def test_a_state_file_of_another_step_is_refused_naming_it(
    two_step_run, tmp_path, capsys, name, what
) -> None:
    run, config = two_step_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    last = copy / "checkpoints" / "step-000002" / "trainer_state"
    assert json.loads((last / "state.json").read_text())["optimizer_updates"] == 2
    shutil.copyfile(copy / "checkpoints" / "step-000001" / "trainer_state" / name, last / name)
    capsys.readouterr()
    args = ["train", str(config), "--output-dir", str(copy), "--resume", "auto", "--max-steps", "3"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert (
        f"{last / name} cannot be read (ValueError: it holds the {what} after 1 update(s), but the checkpoint's "
        "state.json records 2: a file copied from another checkpoint?)"
    ) in err
    assert "--resume " in err and "step-000001" in err  # the earlier, whole checkpoint is offered


def test_a_checkpoint_that_recorded_no_counts_resumes(two_step_run, tmp_path) -> None:
    """Checkpoints written before the counts were kept have none to compare with."""
    run, config = two_step_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    state_file = copy / "checkpoints" / "step-000002" / "trainer_state" / "state.json"
    state = json.loads(state_file.read_text())
    del state["optimizer_updates"], state["scheduler_steps"]
    state_file.write_text(json.dumps(state))
    args = ["train", str(config), "--output-dir", str(copy), "--resume", "auto", "--max-steps", "3"]
    assert main(args) == 0

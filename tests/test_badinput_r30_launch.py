"""Bad-input round 30: `imgalign train` (a resume included) with a launcher's WORLD_SIZE, RANK and LOCAL_RANK left
in the shell but no launcher's MASTER_ADDR."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.cli import main
from imgalign.trainers.testing import one_step_config, write_config
from imgalign.trainers.trainer import accelerator_failure

# torch's own line, as accelerate's Accelerator() raised it with WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 and no MASTER_ADDR
RENDEZVOUS = (
    "Error initializing torch.distributed using env:// rendezvous: environment variable MASTER_ADDR expected, but "
    "not set"
)


def test_a_rendezvous_failure_says_to_launch_or_unset_the_variables() -> None:
    """The message names the process group, the WORLD_SIZE the environment holds, and both ways out."""
    said = str(accelerator_failure(ValueError(RENDEZVOUS), {"WORLD_SIZE": "2", "RANK": "0"}))
    assert said == (
        f"accelerate could not set up the process group: {RENDEZVOUS}. WORLD_SIZE=2 and RANK in the environment "
        "ask for one of several processes, as accelerate launch (or torchrun) starts them; start the run that way, "
        "or unset WORLD_SIZE, RANK and LOCAL_RANK to train in one process"
    )


def test_train_with_a_leftover_world_size_and_rank_names_them_and_writes_nothing(
    sd3_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 imgalign train ...` said only torch's line (a ValueError from inside
    Accelerator(), passed through as it was): neither that these variables ask for a launch of several processes
    nor what to do."""
    out = tmp_path / "run"
    path = write_config(one_step_config(sd3_dir, out), tmp_path / "c.yaml")
    for name, value in {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(name, value)

    def rendezvous(**kwargs: object) -> None:
        raise ValueError(RENDEZVOUS)

    monkeypatch.setattr("accelerate.Accelerator", rendezvous)
    assert main(["train", str(path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (
        f"imgalign train: error: accelerate could not set up the process group: {RENDEZVOUS}. WORLD_SIZE=2"
        in err
    )
    assert "unset WORLD_SIZE, RANK and LOCAL_RANK to train in one process" in err
    assert not (out / "metrics.jsonl").exists() and not (out / "checkpoints").exists()

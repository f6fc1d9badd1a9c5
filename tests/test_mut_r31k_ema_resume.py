"""Mutation round 31k: a resume whose ema.safetensors holds another file of the checkpoint (copied over it by hand)
names that file and what it should hold, as the optimizer, scheduler and RNG files are named (not a bare key)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from imgalign.cli import main
from imgalign.trainers.testing import one_step_config, write_config


def test_an_ema_file_holding_another_file_is_named_with_what_it_lacks(
    sd3_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    cfg = write_config(one_step_config(sd3_dir, run, train={"ema_decay": 0.5}), tmp_path / "c.yaml")
    assert main(["train", str(cfg)]) == 0
    st = run / "checkpoints" / "step-000001" / "trainer_state"
    shutil.copyfile(st / "rng_0.safetensors", st / "ema.safetensors")
    capsys.readouterr()
    assert main(["train", str(cfg), "--resume", "auto", "--max-steps", "2"]) == 2
    err = capsys.readouterr().err
    assert (
        f"error: {st / 'ema.safetensors'} cannot be read (ValueError: it holds no EMA weights of this run's "
        "trainable set (KeyError: '"
    ) in err
    assert "another file copied over it?" in err and "Traceback" not in err

"""`log.progress: false` in a training config silences the libraries' bars as --no-progress does (stop 58)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from imgalign.cli import main
from imgalign.trainers.testing import one_step_config, write_config

torch.set_num_threads(1)


def test_log_progress_false_in_the_config_silences_the_libraries_bars(
    sd3_dir: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A run configured with log.progress: false still printed diffusers' and transformers' bars ("Loading
    weights", "Writing model shards" at each save): only the --no-progress flag silenced them. The config now does
    too, and the caller's bar settings come back after the run."""
    from diffusers.utils import logging as diffusers_logging

    cfg = one_step_config(sd3_dir, tmp_path / "quiet", log={"checkpoint_every": 1})
    assert cfg["log"]["progress"] is False
    assert main(["train", str(write_config(cfg, tmp_path / "q.yaml"))]) == 0
    err = capfd.readouterr().err
    assert "%|" not in err, err
    assert diffusers_logging.is_progress_bar_enabled()
    cfg = one_step_config(sd3_dir, tmp_path / "bars", log={"checkpoint_every": 1, "progress": True})
    assert main(["train", str(write_config(cfg, tmp_path / "b.yaml"))]) == 0
    assert "Writing model shards" in capfd.readouterr().err

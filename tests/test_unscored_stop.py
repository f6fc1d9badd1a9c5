"""train.unscored_stop_steps: a run whose reward is never finite stops after that many steps, not at its end (own
fixes, stop 57: a broken reward ran a whole run, hours on a GPU, to end in the nothing-trained error)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from imgalign.cli import main
from imgalign.config import ConfigError, load_config
from imgalign.trainers.config import FlowGRPOConfig
from imgalign.trainers.testing import one_step_config, write_config

torch.set_num_threads(1)

REWARDS = """
import torch


def all_nan(images, prompts, metadata=None):
    return torch.full((len(images),), float("nan"))
"""


def _run(sd3_dir: Path, tmp_path: Path, name: str, stop: int) -> tuple[int, Path]:
    out = tmp_path / name
    cfg = one_step_config(
        sd3_dir,
        out,
        train={"max_steps": 4, "unscored_stop_steps": stop},
        rewards={"names": ["unscored_rewards:all_nan"]},
    )
    return main(["train", str(write_config(cfg, tmp_path / f"{name}.yaml"))]), out


def _steps(out: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_a_never_finite_reward_stops_the_run_after_the_set_steps(
    sd3_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "unscored_rewards.py").write_text(REWARDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    rc, out = _run(sd3_dir, tmp_path, "early", 2)
    err = capsys.readouterr().err
    assert rc == 2 and _steps(out) == [1, 2]
    assert "reward 'all_nan' gave no finite score" in err and "of the 2 step(s)" in err, err
    assert "the run stopped there (train.unscored_stop_steps)" in err and "--output-dir" in err
    # 0: the run goes on to train.max_steps and its last checkpoint, and ends in the same error
    rc, out = _run(sd3_dir, tmp_path, "late", 0)
    err = capsys.readouterr().err
    assert rc == 2 and _steps(out) == [1, 2, 3, 4] and "of the 4 step(s)" in err, err
    assert "the checkpoints hold the weights the run started from" in err
    assert (out / "checkpoints" / "step-000004" / "trainer_state" / "state.json").is_file()


def test_a_negative_unscored_stop_steps_is_refused() -> None:
    with pytest.raises(
        ConfigError, match=r"train.unscored_stop_steps must be >= 0 \(0 = check only at the end\)"
    ):
        load_config(FlowGRPOConfig, None, ["train.unscored_stop_steps=-1"]).validate()


def test_a_resume_may_change_unscored_stop_steps_without_a_config_change() -> None:
    """It decides only when a broken run stops, not what a step computes: out of the checkpoint's config hash, so
    checkpoints written before the setting existed hash as before."""
    from imgalign.trainers.trainer import config_hash

    def hashed(*over: str) -> str:
        return config_hash(load_config(FlowGRPOConfig, None, list(over)))

    assert hashed("train.unscored_stop_steps=0") == hashed() == hashed("train.unscored_stop_steps=9")

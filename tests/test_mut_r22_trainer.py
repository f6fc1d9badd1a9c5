"""trainers/trainer.py, mutation round 22: behaviour the round's surviving mutants showed untested."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from imgalign.trainers.testing import one_step_config, write_config

torch.set_num_threads(1)

# one call scores the step's 8 samples (batch_size 8), in groups of 2: group 0 ties, groups 1 and 2 differ, group 3
# has one finite score (a NaN beside it), so it is dropped like a tie
FIXED_REWARD = """
import torch


def fixed(images, prompts, metadata=None):
    return torch.tensor([1.0, 1.0, 0.0, 2.0, 0.0, 1.0, 3.0, float("nan")])[: len(images)]
"""


def test_a_steps_advantage_metrics_count_the_groups_and_samples_the_balancer_kept(
    sd3_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """train/zero_std_ratio is the share of prompt groups dropped (2 of 4: a tie, and a group with one finite score),
    train/valid_ratio the share of samples kept (4 of 8), train/adv_abs_mean the mean |A| over the kept samples only
    (each ~1 here: two members of a group of 2 at +-1 std), not diluted by the dropped samples' zeros."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import FlowGRPOTrainer

    (tmp_path / "r22_rewards.py").write_text(FIXED_REWARD)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = one_step_config(
        sd3_dir,
        tmp_path / "run",
        sampling={"samples_per_step": 8, "batch_size": 8},
        rewards={"names": ["r22_rewards:fixed"]},
    )
    tr = FlowGRPOTrainer(
        load_config(FlowGRPOConfig, write_config(cfg, tmp_path / "c.yaml")), tmp_path / "run"
    )
    tr.setup()
    m = tr.train_step(0)
    assert m["train/zero_std_ratio"] == pytest.approx(0.5)
    assert m["train/valid_ratio"] == pytest.approx(0.5)
    assert m["train/adv_abs_mean"] == pytest.approx(1.0, abs=1e-3)

"""trainers.testing.scored_rollout samples in eval mode, as the trainer's step does (mutation round 29)."""

from __future__ import annotations

from pathlib import Path

import torch

from imgalign.trainers import testing
from imgalign.trainers.testing import one_step_config, scored_rollout, write_config

torch.set_num_threads(1)


def test_scored_rollout_samples_with_the_model_in_eval_mode_and_leaves_it_in_train_mode(
    sd3_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """The trainer samples its rollouts after model.eval() (trainer.py, "---- rollout"); scored_rollout says it does
    too, and a version sampling in train mode passed every test of it."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import FlowGRPOTrainer

    cfg = one_step_config(sd3_dir, tmp_path / "run")
    tr = FlowGRPOTrainer(
        load_config(FlowGRPOConfig, write_config(cfg, tmp_path / "c.yaml")), tmp_path / "run"
    )
    tr.setup()
    seen, real = [], testing.first_rollout
    monkeypatch.setattr(
        testing, "first_rollout", lambda t, step=0: seen.append(t.model.training) or real(t, step)
    )
    tr.model.train()
    scored_rollout(tr, 0)
    assert seen == [False]
    assert tr.model.training

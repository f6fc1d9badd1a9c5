"""trainers.testing: scored_rollout samples in eval mode, as the trainer's step does, and first_rollout(tr, step) draws
that step's prompts (mutation round 29)."""

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


def test_first_rollout_of_a_later_step_samples_that_steps_prompts(sd3_dir: Path, tmp_path: Path) -> None:
    """first_rollout(tr, step) is the rollout of training step `step`: its prompts are that step's, each repeated
    for its group (a version drawing step 0's prompts for every step passed the tests of later steps, which read
    only the step's seeds and SDE window)."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import FlowGRPOTrainer

    cfg = one_step_config(sd3_dir, tmp_path / "run")
    tr = FlowGRPOTrainer(
        load_config(FlowGRPOConfig, write_config(cfg, tmp_path / "c.yaml")), tmp_path / "run"
    )
    tr.setup()
    first, later = tr.sampler.for_step(0, 2).prompts, tr.sampler.for_step(3, 2).prompts
    assert first != later  # the test's premise: the two steps draw other prompts
    ro, gid = testing.first_rollout(tr, 3)
    assert ro.prompts == [later[0]] * 2 + [later[1]] * 2
    assert gid.tolist() == [0, 0, 1, 1]

"""trainers/trainer.py, mutation round 22 (second pass): diverged samples are not counted as scorable."""

from __future__ import annotations

from pathlib import Path

import torch

from imgalign.trainers.testing import one_step_config, write_config

torch.set_num_threads(1)


def test_diverged_samples_are_not_counted_as_scorable_so_a_diverged_policy_blames_no_reward(
    sd3_dir: Path, tmp_path: Path
) -> None:
    """A step whose 4 samples all diverge (NaN latents and images) leaves every sample unscored and trains nothing,
    but it counts no scorable sample either: a run of such steps is a diverged policy, not a reward that never
    scored (no NothingTrained naming the reward). A step where 3 of 4 diverge counts the 1 sample left, and the
    reward's finite score of it."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import FlowGRPOTrainer

    cfg = one_step_config(sd3_dir, tmp_path / "run", train={"max_steps": 2})
    tr = FlowGRPOTrainer(
        load_config(FlowGRPOConfig, write_config(cfg, tmp_path / "c.yaml")), tmp_path / "run"
    )
    tr.setup()
    inner = tr.rollout_fn
    bad = [slice(0, 4), slice(1, 4)]  # the samples each step diverges

    def diverging(ctx, prompts, meta, ids, gids):
        ro = inner(ctx, prompts, meta, ids, gids)
        rows = bad.pop(0)
        ro.latents[rows] = float("nan")
        ro.images[rows] = float("nan")
        return ro

    tr.rollout_fn = diverging
    tr.train_step(0)
    assert tr.idle_steps == 1
    assert tr.scored.tolist() == [0.0, 0.0]  # [finite red_reward scores, samples that did not diverge]
    assert tr._nothing_trained(1) is None  # not a reward's fault
    tr._check_trained(1)
    tr.train_step(1)
    assert tr.idle_steps == 2
    assert tr.scored.tolist() == [1.0, 1.0]
    # now one sample was scorable and scored finite: still no reward to blame
    assert tr._nothing_trained(2) is None

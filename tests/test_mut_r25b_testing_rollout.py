"""Round 25 (second pass) mutants of trainers/testing.py's first_rollout and scored_rollout, the helpers tests and
benches use to run the update on a real rollout: each prompt's group is its rows in a row, sampled without grad,
scored as the trainer scores it (a reward of weight 0 masks no sample) and left in train mode."""

from __future__ import annotations

from pathlib import Path

import torch

from imgalign.trainers.testing import first_rollout, one_step_config, scored_rollout, write_config

torch.set_num_threads(1)


def test_scored_rollout_groups_each_prompts_rows_without_grad_as_the_trainer_scores_them(
    sd3_dir: Path, tmp_path: Path
) -> None:
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import FlowGRPOTrainer

    nan = "imgalign.trainers.testing:nan_every_third_reward"
    cfg = one_step_config(
        sd3_dir,
        tmp_path / "run",
        rewards={"names": ["imgalign.trainers.testing:red_reward", nan], "weights": [1.0, 0.0]},
    )
    tr = FlowGRPOTrainer(
        load_config(FlowGRPOConfig, write_config(cfg, tmp_path / "c.yaml")), tmp_path / "run"
    )
    tr.setup()
    batch = tr.sampler.for_step(0, 2)
    ro, gid = first_rollout(tr)
    assert ro.prompts == [batch.prompts[0]] * 2 + [batch.prompts[1]] * 2
    assert gid.tolist() == ro.group_ids.tolist() == [0, 0, 1, 1]
    assert not ro.log_probs.requires_grad and not ro.latents.requires_grad
    tr.model.eval()
    ro, scores, _, adv, valid, _ = scored_rollout(tr, 0)
    assert tr.model.training
    # the weight-0 reward's NaNs (images 0 and 3) are only logged: they enter as 0 and mask no sample
    assert scores[1, [0, 3]].tolist() == [0.0, 0.0] and torch.isfinite(scores).all()
    assert valid.all() and torch.isfinite(adv).all()

"""Round 36m (training settings at their extremes): train.warmup_steps longer than the run kept the learning rate at
a sliver of train.lr, and train.ema_decay=0.999999 kept the exported and evaluated EMA weights the base model's,
while the run said 'done' with nothing said of either; now the run warns of each at its start."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from imgalign.trainers.config import TrainConfig
from imgalign.trainers.testing import one_step_config, write_config
from imgalign.trainers.trainer import horizon_warnings

torch.set_num_threads(1)


def test_a_warm_up_longer_than_the_run_is_named_with_the_share_of_lr_reached():
    (line,) = horizon_warnings(TrainConfig(warmup_steps=100000), 2)
    assert line == (
        "train.warmup_steps=100000 is longer than this run's 2 optimizer update(s) (train.max_steps x "
        "train.updates_per_step): the learning rate reaches only 2e-05 x train.lr; lower train.warmup_steps (or raise "
        "train.max_steps)"
    )
    assert horizon_warnings(TrainConfig(warmup_steps=2), 2) == []  # reaches train.lr at the last update
    # the recipe's 20 over `--max-steps 2`'s 4 updates reaches 0.2 x train.lr: a short run, not warned of
    assert horizon_warnings(TrainConfig(warmup_steps=20), 4) == []
    assert len(horizon_warnings(TrainConfig(warmup_steps=41), 4)) == 1  # under a tenth


@pytest.mark.parametrize(
    ("decay", "updates", "warned"),
    # (0.9, 4): the recipe's EMA over `--max-steps 2`, 66% of the base: a short run, not warned of
    [(0.999999, 200, True), (0.9, 100, False), (0.999, 50, True), (0.99, 50, False), (0.9, 4, False)],
)
def test_an_ema_slower_than_the_run_is_named_with_the_base_models_share(decay, updates, warned):
    lines = horizon_warnings(TrainConfig(ema_decay=decay), updates)
    assert bool(lines) is warned
    if warned:
        assert lines[0].startswith(
            f"train.ema_decay={decay:g} over this run's {updates} optimizer update(s): "
        )
        assert (
            f"stay {decay**updates:.4%} the base model's" in lines[0]
            and "train.ema_decay=0 (off)" in lines[0]
            and f"lower train.ema_decay (below {0.5 ** (1 / updates):.4g} keeps under half of the base)"
            in lines[0]
        )
    assert horizon_warnings(TrainConfig(ema_decay=0.0), 1) == []  # off


def test_the_run_warns_at_its_start(sd3_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import FlowGRPOTrainer

    cfg = one_step_config(sd3_dir, tmp_path / "run", train={"max_steps": 1, "ema_decay": 0.999999})
    tr = FlowGRPOTrainer(
        load_config(FlowGRPOConfig, write_config(cfg, tmp_path / "c.yaml")), tmp_path / "run"
    )
    with caplog.at_level("WARNING"):
        tr.setup()
    assert "train.ema_decay=0.999999 over this run's 1 optimizer update(s): " in caplog.text
    assert "stay 99.9999% the base model's" in caplog.text

"""trainers/trainer.py, mutation round 22 (second pass): the rows each optimizer update of a step trains on."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from imgalign.trainers.testing import first_rollout, one_step_config, write_config

torch.set_num_threads(1)


def test_each_step_shuffles_the_rows_between_its_optimizer_updates_reproducibly_from_the_seed(
    sd3_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """train.updates_per_step 2 on 8 samples (4 prompt groups of 2): each step's two optimizer updates train on 4
    rows each, every row once; which rows go to which update is a shuffle drawn anew each step (not the samples in
    order, where the first update would always see the first two prompts and the second the last two), the same
    for the same train.seed and step, and another for another train.seed."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import FlowGRPOTrainer

    cfg = one_step_config(
        sd3_dir,
        tmp_path / "run",
        sampling={"samples_per_step": 8, "batch_size": 8},
        train={"micro_batch_size": 4, "updates_per_step": 2, "warmup_steps": 0},
    )
    tr = FlowGRPOTrainer(
        load_config(FlowGRPOConfig, write_config(cfg, tmp_path / "c.yaml")), tmp_path / "run"
    )
    tr.setup()
    ro, _ = first_rollout(tr)
    adv = torch.tensor([1.0, -1.0] * 4)
    # every row trained: the update keeps them all, in the shuffled order
    valid = torch.ones(8, dtype=torch.bool)

    updates = [0]  # optimizer updates taken so far
    seen: list[tuple[int, int]] = []  # (update, row) of every row a loss was computed on
    loss, opt_step = tr.objective.loss, tr.optimizer.step

    def spy_loss(ctx, ro_, mb, term, adv_, valid_):
        seen.extend((updates[0], int(r)) for r in mb)
        return loss(ctx, ro_, mb, term, adv_, valid_)

    def spy_step(*a, **kw):
        updates[0] += 1
        return opt_step(*a, **kw)

    monkeypatch.setattr(tr.objective, "loss", spy_loss)
    monkeypatch.setattr(tr.optimizer, "step", spy_step)

    def split(step: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The rows of the step's first and second optimizer update (each sorted)."""
        seen.clear()
        first = updates[0]
        m = tr._update(step, ro, adv, valid)
        assert m["train/skipped_updates"] == 0 and m["train/empty_updates"] == 0
        assert updates[0] == first + 2
        rows = [tuple(sorted({r for u, r in seen if u == first + k})) for k in (0, 1)]
        assert [len(r) for r in rows] == [4, 4] and sorted(rows[0] + rows[1]) == list(range(8))
        return rows[0], rows[1]

    splits = [split(s) for s in range(4)]
    in_order = ((0, 1, 2, 3), (4, 5, 6, 7))
    assert any(s != in_order for s in splits), splits  # shuffled, not the samples in order
    assert len(set(splits)) > 1, splits  # drawn anew each step
    assert split(2) == splits[2]  # the same train.seed and step: the same rows per update
    tr.cfg.train.seed += 1
    assert [split(s) for s in range(4)] != splits  # another seed: another shuffle

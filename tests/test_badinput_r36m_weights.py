"""Round 36m (training settings at their extremes): a learning rate or weight decay so large that an AdamW update
overflows float32 wrote a checkpoint of inf weights and the run said 'done'; now no checkpoint of them is written."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from imgalign.trainers.testing import one_step_config, write_config

torch.set_num_threads(1)


def _trainer(sd3_dir: Path, tmp_path: Path, **train):
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import FlowGRPOTrainer

    cfg = one_step_config(sd3_dir, tmp_path / "run", train={"max_steps": 2, **train})
    tr = FlowGRPOTrainer(
        load_config(FlowGRPOConfig, write_config(cfg, tmp_path / "c.yaml")), tmp_path / "run"
    )
    tr.setup()
    return tr


@pytest.mark.parametrize("ema", [0.0, 0.9])
def test_inf_weights_are_refused_a_checkpoint(sd3_dir: Path, tmp_path: Path, ema: float) -> None:
    from imgalign.trainers.trainer import DivergedWeights

    tr = _trainer(sd3_dir, tmp_path, weight_decay=1e308, ema_decay=ema)
    good = tr.save(1)  # finite weights: saved
    with torch.no_grad():
        tr.params[0].mul_(1 - 1e-4 * 1e308)  # AdamW's decoupled decay with lr x weight_decay = 1e304: inf
        if tr.ema is not None:
            tr.ema.shadow[0].copy_(tr.params[0])
    with pytest.raises(DivergedWeights) as e:
        tr.save(2)
    msg = str(e.value)
    assert msg.startswith(
        f"after step 2 trainable weight tensor(s) hold NaN/inf values ({1 + (ema > 0)} here, e.g. "
    )
    assert "train.weight_decay=1e+308" in msg and "lower train.lr" in msg
    assert f"checkpoint step-000002 is not written (the last whole one: {good})" in msg
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step-000001"]


def test_a_rollout_diverging_before_any_update_blames_the_sampling_settings_not_the_lr(
    sd3_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """sampling.noise_level=1e30 (or guidance_scale=1e30) makes the base model's first rollout NaN: the warning said
    "A policy that diverges: lower train.lr", of a learning rate that had not acted yet. Once an update has been
    applied, lowering train.lr is the advice again."""
    tr = _trainer(sd3_dir, tmp_path)
    inner = tr.rollout_fn

    def diverging(ctx, prompts, meta, ids, gids):
        ro = inner(ctx, prompts, meta, ids, gids)
        ro.latents[:2] = float("nan")
        ro.images[:2] = float("nan")
        return ro

    tr.rollout_fn = diverging
    with caplog.at_level("WARNING"):
        tr.train_step(0)
    noise = tr.cfg.sampling.noise_level
    assert (
        "No update has been applied yet, so the model's own rollout diverges with these settings: lower "
        in (caplog.text)
    )
    assert f"sampling.noise_level ({noise:g}) or sampling.guidance_scale" in caplog.text
    assert "lower train.lr" not in caplog.text
    caplog.clear()
    for p in tr.params:  # an applied update: AdamW holds state
        p.grad = torch.zeros_like(p)
    tr.optimizer.step()
    tr.optimizer.zero_grad()
    with caplog.at_level("WARNING"):
        tr.train_step(1)
    assert "A policy that diverges: lower train.lr" in caplog.text and "No update" not in caplog.text


@pytest.mark.parametrize(("over", "named"), [({"kl_beta": 1e30}, "objective.kl_beta=1e+30"), ({}, None)])
def test_a_skipped_update_names_the_loss_weights_set(
    sd3_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, over: dict, named: str | None
) -> None:
    """objective.kl_beta=1e30 overflows the loss once the KL is > 0: every update after the first was skipped with
    advice naming only train.lr and the rewards."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.testing import first_rollout
    from imgalign.trainers.trainer import FlowGRPOTrainer

    cfg = {**one_step_config(sd3_dir, tmp_path / "run"), "objective": over}
    tr = FlowGRPOTrainer(
        load_config(FlowGRPOConfig, write_config(cfg, tmp_path / "c.yaml")), tmp_path / "run"
    )
    tr.setup()
    ro, _ = first_rollout(tr)
    n = ro.images.shape[0]
    adv = torch.tensor([float("nan"), 1.0] * (n // 2))  # a non-finite loss
    with caplog.at_level("WARNING"):
        m = tr._update(0, ro, adv, torch.ones(n, dtype=torch.bool))
    assert m["train/skipped_updates"] >= 1 and "lower train.lr or check the rewards" in caplog.text
    if named:
        assert f"or check the rewards, or lower the loss weights ({named})" in caplog.text
    else:
        assert "loss weights" not in caplog.text

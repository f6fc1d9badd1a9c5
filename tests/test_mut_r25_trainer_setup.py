"""Round 25: tests that kill round 24's trainers/trainer.py mutants RA65 (rewards.marble.refresh_every not passed
to the balancer) and RA67 (a folder holding only a metrics.jsonl taken over without --resume)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from imgalign.cli import main
from imgalign.trainers.config import MarbleConfig, RewardConfig
from imgalign.trainers.testing import one_step_config, write_config
from imgalign.trainers.trainer import FlowGRPOTrainer


def test_marble_solves_alpha_every_refresh_every_updates_with_the_configs_ema() -> None:
    rewards = RewardConfig(
        names=["a", "b"],
        balancer="marble",
        marble=MarbleConfig(ema=0.5, refresh_every=3, solver="projected_gradient"),
    )
    host = SimpleNamespace(
        cfg=SimpleNamespace(rewards=rewards, objective=SimpleNamespace(name="grpo")),
        objective=SimpleNamespace(head=None),
        rewards={"a": None, "b": None},
        is_main=True,
    )
    marble = FlowGRPOTrainer._build_balancing(host).balancer
    assert [marble.needs_refresh(u) for u in range(7)] == [True, False, False, True, False, False, True]
    assert (marble.ema, marble.solver, marble.names) == (0.5, "projected_gradient", ["a", "b"])


def test_a_folder_holding_only_a_runs_metrics_is_refused_without_resume(
    sd3_dir: Path, tmp_path: Path, capsys
) -> None:
    # a run stopped before its first checkpoint leaves metrics.jsonl alone: a new run would append to its rows
    out = tmp_path / "run"
    out.mkdir()
    row = json.dumps({"step": 1, "reward/red_reward/mean": 0.25}) + "\n"
    (out / "metrics.jsonl").write_text(row)
    path = write_config(one_step_config(sd3_dir, out), tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 2
    assert "already holds a training run (metrics.jsonl)" in capsys.readouterr().err
    assert (out / "metrics.jsonl").read_text() == row and not (out / "checkpoints").exists()

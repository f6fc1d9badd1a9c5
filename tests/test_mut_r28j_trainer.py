"""trainers/trainer.py, mutation round 28: the training loop and setup, for behaviour no test pinned."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import imgalign.trainers.trainer as T


def test_a_resumed_run_counts_train_unscored_stop_steps_from_its_own_first_step() -> None:
    """train.unscored_stop_steps counts the steps this call ran (the idle steps are counted from the resume on): a
    run resumed at step 3 asks after its own second step (step 5) and stops there, where counting the run's steps
    (done == 2) never asked and trained on to the end."""
    from imgalign.trainers.trainer import NothingTrained

    calls: dict[str, list] = {"step": [], "asked": []}
    tr = SimpleNamespace(
        cfg=SimpleNamespace(
            train=SimpleNamespace(max_steps=6, time_budget_min=0, unscored_stop_steps=2),
            eval=SimpleNamespace(at_start=False, every=-1),
            log=SimpleNamespace(progress=False, checkpoint_every=0),
        ),
        start_step=3,
        is_main=True,
        acc=SimpleNamespace(wait_for_everyone=lambda: None, end_training=lambda: None),
        train_step=lambda step: calls["step"].append(step) or {},
        _out_of_time=lambda *a: False,
        _log=lambda step, m: None,
        save=lambda step: None,
        _check_trained=lambda ran: None,
        _nothing_trained=lambda ran, early: calls["asked"].append(ran) or NothingTrained("none"),
    )
    with pytest.raises(NothingTrained):
        T.FlowGRPOTrainer.train(tr)
    assert calls == {"step": [3, 4], "asked": [2]}


def test_rewards_without_weights_weigh_one_each(sd3_dir, tmp_path) -> None:
    """rewards.weights left out: every reward weighs 1 (what a plug-in balancer receives, and what the weighted sum
    adds up), whatever their number."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.testing import one_step_config, write_config

    names = ["imgalign.trainers.testing:red_reward", "imgalign.trainers.testing:blue_reward"]
    cfg = one_step_config(sd3_dir, tmp_path / "run", rewards={"names": names})
    tr = T.FlowGRPOTrainer(
        load_config(FlowGRPOConfig, write_config(cfg, tmp_path / "c.yaml")), tmp_path / "run"
    )
    tr.setup()
    assert tr.reward_weights.tolist() == [1.0, 1.0]


def test_a_run_keeps_its_last_log_keep_last_checkpoints(sd3_dir, tmp_path) -> None:
    """log.keep_last 2 with a checkpoint every step: after 3 steps the run folder holds checkpoints 2 and 3 only."""
    from imgalign.cli import main
    from imgalign.trainers.testing import one_step_config, write_config

    out = tmp_path / "run"
    cfg = one_step_config(sd3_dir, out, train={"max_steps": 3}, log={"checkpoint_every": 1, "keep_last": 2})
    cfg["sampling"]["num_steps"] = 2
    assert main(["train", str(write_config(cfg, tmp_path / "c.yaml"))]) == 0
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-000002", "step-000003"]


def test_a_run_that_wrote_the_folder_while_setup_waited_for_its_lock_is_refused(
    sd3_dir, tmp_path, monkeypatch
) -> None:
    """The output folder is checked again once its lock is held: a run that ended between the first check and the
    lock (its metrics.jsonl now there) is refused, not appended to."""
    from imgalign.config import ConfigError, load_config
    from imgalign.trainers.checkpoint import unlock_output_dir
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.testing import one_step_config, write_config

    out = tmp_path / "run"
    real = T.FlowGRPOTrainer._lock_output_dir

    def lock_after_another_run_wrote(self) -> None:
        (self.out / "metrics.jsonl").write_text('{"step": 1}\n')  # the other run finished meanwhile
        real(self)

    monkeypatch.setattr(T.FlowGRPOTrainer, "_lock_output_dir", lock_after_another_run_wrote)
    cfg = load_config(FlowGRPOConfig, write_config(one_step_config(sd3_dir, out), tmp_path / "c.yaml"))
    tr = T.FlowGRPOTrainer(cfg, out)
    try:
        with pytest.raises(ConfigError, match="already holds a training run"):
            tr.setup()
    finally:
        unlock_output_dir(out)  # the refused setup took the lock: this process holds nothing after the test

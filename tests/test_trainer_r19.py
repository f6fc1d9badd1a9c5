"""trainers/trainer.py, mutation round 19: a run that trained nothing because a reward was never finite ends in an
error naming it, and behaviour the round's surviving mutants showed untested."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from imgalign.cli import main
from imgalign.trainers.testing import one_step_config, write_config
from imgalign.trainers.trainer import FlowGRPOTrainer

torch.set_num_threads(1)

ALL_NAN_REWARD = """
import torch


def all_nan(images, prompts, metadata=None):
    return torch.full((len(images),), float("nan"))


def inf_first(images, prompts, metadata=None):
    r = images.float().mean(dim=(1, 2, 3))
    r[0] = float("inf")
    return r
"""


def _rewards_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "r19_rewards.py").write_text(ALL_NAN_REWARD)
    monkeypatch.syspath_prepend(str(tmp_path))


def test_a_run_whose_reward_is_never_finite_fails_naming_that_reward(sd3_dir, tmp_path, monkeypatch, capsys):
    """Every score NaN: every sample is masked and every update skipped; the run said so in warnings and still
    exited 0. It now ends in a one-line error (exit 2) naming the reward that was never finite, not the other."""
    _rewards_module(tmp_path, monkeypatch)
    out = tmp_path / "run"
    cfg = one_step_config(
        sd3_dir,
        out,
        train={"max_steps": 2},
        rewards={"names": ["r19_rewards:all_nan", "imgalign.trainers.testing:red_reward"]},
    )
    assert main(["train", str(write_config(cfg, tmp_path / "c.yaml"))]) == 2
    err = capsys.readouterr().err
    assert "reward 'all_nan' gave no finite score" in err and "red_reward" not in err, err
    assert "any of the 8 sample(s) of the 2 step(s)" in err and "--output-dir" in err, err
    assert (out / "checkpoints" / "step-000002" / "trainer_state" / "state.json").is_file()


def _idle_trainer(
    names: list[str], scored: list[float], idle: int, weights: list[float] | None = None
) -> SimpleNamespace:
    stand_in = SimpleNamespace(
        rewards=dict.fromkeys(names),
        scored=torch.tensor(scored),
        idle_steps=idle,
        reward_weights=torch.tensor(weights or [1.0] * len(names)),
        _reduce_sum=lambda t: t,
    )
    stand_in._nothing_trained = lambda steps, early=False: FlowGRPOTrainer._nothing_trained(
        stand_in, steps, early
    )
    return stand_in


def test_only_a_run_idle_at_every_step_with_a_reward_never_finite_fails():
    """A step that trained (one not idle), a run of no step (a resume at train.max_steps), ties of finite rewards, or
    a policy whose every sample diverged are not a reward's fault: no error. Every reward never finite is named."""
    from imgalign.trainers.trainer import NothingTrained, unscored_rewards

    check = FlowGRPOTrainer._check_trained
    check(_idle_trainer(["a", "b"], [0.0, 5.0, 8.0], idle=1), 2)  # one of the 2 steps trained
    check(_idle_trainer(["a"], [0.0, 8.0], idle=0), 0)  # no step ran
    check(_idle_trainer(["a", "b"], [8.0, 8.0, 8.0], idle=2), 2)  # every group tied
    check(_idle_trainer(["a"], [0.0, 0.0], idle=2), 2)  # every sample diverged
    with pytest.raises(
        NothingTrained, match=r"rewards 'a', 'c' gave no finite score .* of the 8 sample\(s\) of the 2"
    ):
        check(_idle_trainer(["a", "b", "c"], [0.0, 3.0, 0.0, 8.0], idle=2), 2)
    # a reward of weight 0 masks no sample, so it is not why nothing trained (here b's groups all tied)
    check(_idle_trainer(["a", "b"], [0.0, 8.0, 8.0], idle=2, weights=[0.0, 1.0]), 2)
    with pytest.raises(NothingTrained, match=r"reward 'c' gave no finite score"):
        check(_idle_trainer(["a", "b", "c"], [0.0, 8.0, 0.0, 8.0], idle=2, weights=[0.0, 1.0, 1.0]), 2)
    assert unscored_rewards(["a", "b"], torch.tensor([0.0, 1.0]), 4) == ["a"]
    assert unscored_rewards(["a", "b"], torch.tensor([0.0, 0.0]), 0) == []
    assert issubclass(NothingTrained, ValueError)  # the CLI's one-line error, exit status 2


def test_the_counts_cover_every_step_and_leave_out_diverged_samples(sd3_dir, tmp_path, monkeypatch) -> None:
    """train_step adds each reward's finite scores of the samples that did not diverge, and those samples, to
    `scored`; a step whose every update had no valid sample adds one idle step; _check_trained gets the steps run."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import run

    out = tmp_path / "run"
    path = write_config(one_step_config(sd3_dir, out, train={"max_steps": 2}), tmp_path / "c.yaml")
    seen: dict[str, object] = {}
    original = FlowGRPOTrainer._check_trained
    mask = FlowGRPOTrainer._mask_diverged

    def spy(self: FlowGRPOTrainer, steps: int) -> None:
        seen.update(steps=steps, scored=self.scored.tolist(), idle=self.idle_steps)
        original(self, steps)

    def one_diverges(self: FlowGRPOTrainer, ro, step: int) -> torch.Tensor:
        ro.images[0] = float("nan")  # the first sample of each step's rollout diverged
        return mask(self, ro, step)

    monkeypatch.setattr(FlowGRPOTrainer, "_check_trained", spy)
    run(load_config(FlowGRPOConfig, str(path), []), out)
    assert seen == {"steps": 2, "scored": [8.0, 8.0], "idle": 0}
    # the same run with one sample of 4 diverged at each of the 2 steps: 6 scored samples, 6 finite scores
    monkeypatch.setattr(FlowGRPOTrainer, "_mask_diverged", one_diverges)
    run(load_config(FlowGRPOConfig, str(path), []), tmp_path / "run2")
    assert seen == {"steps": 2, "scored": [6.0, 6.0], "idle": 0}


def test_any_accumulation_of_accelerates_own_is_refused_two_steps_too():
    """ACCELERATE_GRADIENT_ACCUMULATION_STEPS=2 halves every gradient as 4 quarters it (the check tested 4 alone);
    1, accelerate's default, is no accumulation."""
    from imgalign.config import ConfigError
    from imgalign.trainers.trainer import check_accelerator

    with pytest.raises(ConfigError, match=r"STEPS=2\) and would divide every gradient by 2"):
        check_accelerator("no", "cpu", 2, False, None)
    assert check_accelerator("no", "cpu", 1, False, None) is None


def _loop(max_steps: int, every: int, checkpoint_every: int, at_start: bool = False) -> tuple[list, list]:
    """The steps FlowGRPOTrainer.train evaluates after and saves, on a trainer whose steps do nothing."""
    evaluated: list[int] = []
    saved: list[int] = []
    cfg = SimpleNamespace(
        train=SimpleNamespace(max_steps=max_steps, time_budget_min=0, unscored_stop_steps=0),
        eval=SimpleNamespace(at_start=at_start, every=every),
        log=SimpleNamespace(progress=False, checkpoint_every=checkpoint_every),
    )
    tr = SimpleNamespace(
        cfg=cfg,
        start_step=0,
        is_main=True,
        acc=SimpleNamespace(wait_for_everyone=lambda: None, end_training=lambda: None),
        evaluate=lambda step: evaluated.append(step) or {},
        train_step=lambda step: {},
        _out_of_time=lambda *a: False,
        _log=lambda step, m: None,
        save=saved.append,
        _check_trained=lambda steps: None,
    )
    FlowGRPOTrainer.train(tr)
    return evaluated, saved


def test_evaluations_and_checkpoints_follow_the_steps_they_end_and_the_last_step_has_both():
    """eval.every 2 evaluates after steps 2, 4 (the metrics rows' numbers) and the last; eval.every 0 the last only
    (and with eval.at_start the base model first); log.checkpoint_every 2 saves steps 2, 4 and the last, 0 the last
    only; eval.every -1 never evaluates."""
    assert _loop(5, every=2, checkpoint_every=2) == ([2, 4, 5], [2, 4, 5])
    assert _loop(5, every=0, checkpoint_every=0) == ([5], [5])
    assert _loop(3, every=0, checkpoint_every=3, at_start=True) == ([0, 3], [3])
    assert _loop(4, every=-1, checkpoint_every=3) == ([], [3, 4])


def test_an_infinite_score_is_masked_like_nan_and_grids_start_at_the_first_step(
    sd3_dir, tmp_path, monkeypatch
):
    """A reward's +inf is masked as its NaN is (counted in reward/<name>/nonfinite, its group left out: one of the
    two groups of each step is valid), never trained on; log.sample_every 2 saves the rollout grid of steps 1 and 3
    (the first step's, the base model's images, then every 2 steps), named by their metrics rows."""
    from imgalign.trainers.testing import metric_rows

    _rewards_module(tmp_path, monkeypatch)
    out = tmp_path / "run"
    cfg = one_step_config(
        sd3_dir,
        out,
        train={"max_steps": 3},
        rewards={"names": ["r19_rewards:inf_first"]},
        log={"sample_every": 2},
    )
    assert main(["train", str(write_config(cfg, tmp_path / "c.yaml"))]) == 0
    rows = metric_rows(out)
    assert [r["reward/inf_first/nonfinite"] for r in rows] == [1, 1, 1]
    assert [r["train/valid_ratio"] for r in rows] == [0.5, 0.5, 0.5]
    assert all(r["train/empty_updates"] == 0 and r["train/skipped_updates"] == 0 for r in rows)
    assert sorted(p.name for p in (out / "samples").glob("*.png")) == ["step-000001.png", "step-000003.png"]


def test_a_checkpoint_of_fewer_processes_or_another_lora_rank_either_way_is_refused(tmp_path):
    """_check_resume_fits refuses a checkpoint of 1 process resumed by 2 as one of 2 resumed by 1, and a LoRA rank
    smaller or larger than the one the checkpoint's saved config was trained with."""
    import json

    import yaml

    from imgalign.config import ConfigError

    ckpt = tmp_path / "checkpoints" / "step-000003"
    (ckpt / "trainer_state").mkdir(parents=True)
    (ckpt / "trainer_state" / "state.json").write_text(json.dumps({"step": 3, "num_processes": 1}))
    tr = SimpleNamespace(
        resume_from=ckpt, world=2, out=tmp_path, cfg=SimpleNamespace(model=SimpleNamespace(lora_rank=2))
    )
    with pytest.raises(ConfigError, match="was written by 1 processes; resume with the same number"):
        FlowGRPOTrainer._check_resume_fits(tr)
    tr.world = 1
    (ckpt / "trainer_state" / "config.yaml").write_text(yaml.safe_dump({"model": {"lora_rank": 2}}))
    FlowGRPOTrainer._check_resume_fits(tr)
    for rank in (1, 4):
        tr.cfg.model.lora_rank = rank
        with pytest.raises(ConfigError, match=f"trained with model.lora_rank=2 and this run sets {rank}:"):
            FlowGRPOTrainer._check_resume_fits(tr)


def test_a_resume_that_cannot_continue_says_how_to_launch_or_how_to_start_another_run(tmp_path):
    """A checkpoint of 2 processes names the launch that resumes it, one of 1 process says to run without a launch;
    a LoRA-rank mismatch says to leave out --resume: "give a new --output-dir" was the advice also where the run
    already had a new one (--resume OTHER_RUN/checkpoints/step-N --output-dir NEW)."""
    import json

    import yaml

    from imgalign.config import ConfigError

    ckpt = tmp_path / "old" / "checkpoints" / "step-000003"
    (ckpt / "trainer_state").mkdir(parents=True)
    (ckpt / "trainer_state" / "state.json").write_text(json.dumps({"step": 3, "num_processes": 2}))
    model = SimpleNamespace(lora_rank=4)
    tr = SimpleNamespace(resume_from=ckpt, world=1, out=tmp_path / "new", cfg=SimpleNamespace(model=model))
    with pytest.raises(
        ConfigError,
        match=r"resume with the same number, from `accelerate launch --num_processes 2 "
        r"-m imgalign train \.\.\.` \(this run has 1\)$",
    ):
        FlowGRPOTrainer._check_resume_fits(tr)
    (ckpt / "trainer_state" / "state.json").write_text(json.dumps({"step": 3, "num_processes": 1}))
    tr.world = 2
    with pytest.raises(
        ConfigError, match=r"same number, without accelerate launch \(one process\) \(this run has 2\)"
    ):
        FlowGRPOTrainer._check_resume_fits(tr)
    tr.world = 1
    (ckpt / "trainer_state" / "config.yaml").write_text(yaml.safe_dump({"model": {"lora_rank": 2}}))
    with pytest.raises(
        ConfigError, match=rf"config.yaml\), or leave out --resume to start another run in {tmp_path}/new$"
    ):
        FlowGRPOTrainer._check_resume_fits(tr)
    tr.out = tmp_path / "old"
    with pytest.raises(
        ConfigError, match=r"or leave out --resume and give a new --output-dir to start another run$"
    ):
        FlowGRPOTrainer._check_resume_fits(tr)

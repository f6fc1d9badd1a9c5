"""trainers/trainer.py behaviour no test checked before mutation round 13: resumes (the schedule position, the RNG, an
EMA or balancing state the checkpoint lacks, the logs an earlier checkpoint cuts), setup and --resume messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from imgalign.cli import main
from imgalign.trainers.testing import metric_rows, write_config
from imgalign.trainers.trainer import apply_optimizer_settings, lr_lambda_factory

torch.set_num_threads(1)


def _resumed_at(
    updates: int, schedule: str, lr: float
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """An AdamW over one weight with a 4-update warm-up of a 10-update `schedule`, saved after `updates` updates at
    rate 5e-5 and loaded into one configured with rate `lr`, as a resume does."""

    def build(rate: float) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
        opt = torch.optim.AdamW([torch.nn.Parameter(torch.ones(3))], lr=rate)
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda_factory(4, 10, schedule))

    saved, saved_sched = build(5e-5)
    for _ in range(updates):
        saved.param_groups[0]["params"][0].grad = torch.full((3,), 0.5)
        saved.step()
        saved_sched.step()
    opt, sched = build(lr)
    settings = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
    opt.load_state_dict(saved.state_dict())
    sched.load_state_dict(saved_sched.state_dict())
    apply_optimizer_settings(opt, sched, settings)
    return opt, sched


@pytest.mark.parametrize(
    ("updates", "schedule", "factor"),
    [
        (1, "constant", 0.5),
        (3, "constant", 1.0),
        (7, "cosine", 0.5),
    ],  # warm-up 2/4; held; cosine half way down
)
def test_a_resumed_rate_is_the_configured_one_at_the_loaded_schedule_position(
    updates: int, schedule: str, factor: float
) -> None:
    """The next update's rate is the configured train.lr times the schedule's factor at the checkpoint's position
    (a resume mid warm-up or mid cosine went on at the full rate, or one update ahead), and get_last_lr (the logged
    train/lr) says so; the schedule goes on from there."""
    fn = lr_lambda_factory(4, 10, schedule)
    assert fn(updates) == pytest.approx(factor)
    opt, sched = _resumed_at(updates, schedule, 1e-3)
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-3 * factor)
    assert sched.get_last_lr() == [opt.param_groups[0]["lr"]]
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-3 * fn(updates + 1))


def _run_config(sd3_dir: Path, out: Path, steps: int = 1, **train: Any) -> dict[str, Any]:
    """A training config of the tiny SD3 pipeline: `steps` steps of two samples, `train` settings added."""
    return {
        "model": {"path": str(sd3_dir)},
        "prompts": {"source": "shapes", "tasks": ["single_object"]},
        "sampling": {"num_steps": 2, "group_size": 2, "samples_per_step": 2, "batch_size": 2},
        "rewards": {"names": ["imgalign.trainers.testing:red_reward"]},
        "train": {"max_steps": steps, "lr": 1e-3, "micro_batch_size": 2, **train},
        "eval": {"every": -1},
        "log": {"output_dir": str(out), "sample_every": 0, "trackers": "none", "progress": False},
    }


def _trainer(cfg: dict[str, Any], tmp_path: Path) -> Any:
    """A FlowGRPOTrainer of the config dict `cfg` (not set up)."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import FlowGRPOTrainer

    cfg_path = write_config(cfg, tmp_path / "c.yaml")
    return FlowGRPOTrainer(load_config(FlowGRPOConfig, cfg_path), cfg["log"]["output_dir"])


def test_a_resume_mid_warm_up_goes_on_down_the_warm_up(sd3_dir: Path, tmp_path: Path) -> None:
    """The scheduler's position comes back from the checkpoint: a resume after update 1 of a 4-update warm-up
    trains (and logs) update 2 at 2/4 of train.lr, not at 1/4 again."""
    out = tmp_path / "run"
    path = write_config(_run_config(sd3_dir, out, warmup_steps=4), tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0
    assert main(["train", str(path), "--resume", "auto", "--max-steps", "2"]) == 0
    lrs = [(r["step"], r["train/lr"]) for r in metric_rows(out)]
    assert lrs == [(1, pytest.approx(1e-3 / 4)), (2, pytest.approx(1e-3 * 2 / 4))]


def test_setup_seeds_torchs_global_rng_and_turns_on_gradient_checkpointing(
    sd3_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the rewards draw from torch's global RNG as they build (a fresh head) is a function of train.seed and
    the process, whatever the RNG held before; model.gradient_checkpointing reaches the transformer."""
    import imgalign.trainers.trainer as T
    from imgalign.trainers.prompting import _mix

    drawn = []

    def build_rewards(*args: Any, **kwargs: Any) -> Any:
        drawn.append(torch.rand(3))
        return real(*args, **kwargs)

    real = T.build_rewards
    monkeypatch.setattr(T, "build_rewards", build_rewards)
    cfg = _run_config(sd3_dir, tmp_path / "run", seed=5)
    cfg["model"]["gradient_checkpointing"] = True
    torch.manual_seed(12345)
    tr = _trainer(cfg, tmp_path)
    tr.setup()
    torch.manual_seed(_mix(5, 0, 41, 0))
    assert torch.equal(drawn[0], torch.rand(3))
    assert tr.adapter.transformer.is_gradient_checkpointing
    cfg["model"]["gradient_checkpointing"] = False
    tr = _trainer(cfg | {"log": {**cfg["log"], "output_dir": str(tmp_path / "off")}}, tmp_path)
    tr.setup()
    assert not tr.adapter.transformer.is_gradient_checkpointing


def test_log_trackers_auto_is_tensorboard_when_it_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """log.trackers=auto logs to tensorboard when it is installed, and nowhere but metrics.jsonl when not."""
    import sys
    import types

    cfg = _run_config(Path("unused"), tmp_path / "run")
    cfg["log"]["trackers"] = "auto"
    tr = _trainer(cfg, tmp_path)
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # an import of it fails
    assert tr._trackers() == []
    monkeypatch.setitem(sys.modules, "tensorboard", types.ModuleType("tensorboard"))
    assert tr._trackers() == ["tensorboard"]


def test_resume_of_a_file_or_a_missing_path_says_which(tmp_path: Path) -> None:
    """--resume FILE says it is a file, --resume MISSING that it does not exist, and both what to give."""
    tr = _trainer(_run_config(Path("unused"), tmp_path / "run"), tmp_path)
    file = tmp_path / "state.json"
    file.write_text("{}")
    with pytest.raises(FileNotFoundError, match=f"--resume {str(file)!r} is a file: give 'auto'"):
        tr._resolve_resume(str(file))
    with pytest.raises(FileNotFoundError, match="'nowhere' does not exist: give 'auto'"):
        tr._resolve_resume("nowhere")
    # the checkpoint's own trainer_state/ folder (it said "no complete checkpoint there"): its checkpoint
    ckpt = tmp_path / "run" / "checkpoints" / "step-000002"
    (ckpt / "trainer_state").mkdir(parents=True)
    (ckpt / "trainer_state" / "state.json").write_text("{}")
    assert tr._resolve_resume(str(ckpt / "trainer_state")) == ckpt


def test_a_resume_from_an_earlier_checkpoint_cuts_eval_jsonl_and_keeps_it_with_the_newest_set_aside(
    sd3_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """eval.jsonl is cut back to the resumed step as metrics.jsonl is, and its full copy travels with the newest of
    the checkpoints set aside (as metrics.jsonl's does), so a crash before the first save loses no evaluation."""
    from imgalign.trainers.trainer import FlowGRPOTrainer

    out = tmp_path / "run"
    cfg = _run_config(sd3_dir, out, steps=3)
    cfg["log"].update(checkpoint_every=1, keep_last=5)
    path = write_config(cfg, tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0
    (out / "eval.jsonl").write_text("".join(json.dumps({"step": k, "eval/x": k}) + "\n" for k in range(4)))

    def killed(self: Any, step: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(FlowGRPOTrainer, "train_step", killed)
    with pytest.raises(KeyboardInterrupt):
        main(["train", str(path), "--resume", str(out / "checkpoints" / "step-000001")])

    def steps(p: Path) -> list[int]:
        return [json.loads(line)["step"] for line in p.read_text().splitlines()]

    assert steps(out / "eval.jsonl") == [0, 1]
    aside = out / "checkpoints" / "superseded-step-000003"
    assert steps(aside / "eval.jsonl") == [0, 1, 2, 3] and steps(aside / "metrics.jsonl") == [1, 2, 3]
    assert not (out / "checkpoints" / "superseded-step-000002" / "eval.jsonl").exists()


def test_a_checkpoint_trained_with_an_ema_that_lost_its_ema_file_is_damaged(
    sd3_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only a checkpoint that says it was trained without an EMA (exported_weights raw) starts the EMA from its
    weights; one trained with an EMA whose ema.safetensors is gone is damaged, and the resume says which file."""
    out = tmp_path / "run"
    path = write_config(_run_config(sd3_dir, out, ema_decay=0.5), tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0
    ema = out / "checkpoints" / "step-000001" / "trainer_state" / "ema.safetensors"
    ema.unlink()
    capsys.readouterr()
    assert main(["train", str(path), "--resume", "auto", "--max-steps", "2"]) == 2
    assert str(ema) in capsys.readouterr().err
    assert [r["step"] for r in metric_rows(out)] == [1]


def test_marble_resumed_from_a_checkpoint_without_balancing_state_starts_fresh_and_says_why(
    sd3_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run trained without MARBLE and without cosine diagnostics saves no balance.pt; resumed with MARBLE, the
    balancing starts fresh with a warning that says the checkpoint has none."""
    out = tmp_path / "run"
    cfg = _run_config(sd3_dir, out)
    cfg["rewards"] = {
        "names": ["imgalign.trainers.testing:red_reward", "imgalign.trainers.testing:brightness_reward"],
        "balancer": "gdpo",
    }
    path = write_config(cfg, tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0
    assert not (out / "checkpoints" / "step-000001" / "trainer_state" / "balance.pt").exists()
    argv = ["train", str(path), "--resume", "auto", "--max-steps", "2", "--set", "rewards.balancer=marble"]
    with caplog.at_level("WARNING"):
        assert main(argv) == 0
    assert (
        "its reward-balancing state does not fit this run: it has none (trained without rewards.balancer=marble "
        "and rewards.diagnose_cosines)" in caplog.text
    )
    assert "balance/alpha/red_reward" in metric_rows(out)[-1]


def test_a_resume_restores_torchs_global_rng_as_the_uninterrupted_run_left_it(
    sd3_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a plug-in draws from torch's global RNG in a step (an augmentation, a noisy reward) is the same in a
    resumed run as in the uninterrupted one: the checkpoint's RNG state comes back."""
    from imgalign.trainers.trainer import FlowGRPOTrainer

    drawn: list[torch.Tensor] = []
    real = FlowGRPOTrainer.train_step

    def train_step(self: Any, step: int) -> dict[str, float]:
        drawn.append(torch.rand(3))
        return real(self, step)

    monkeypatch.setattr(FlowGRPOTrainer, "train_step", train_step)
    whole = write_config(_run_config(sd3_dir, tmp_path / "whole", steps=2), tmp_path / "whole.yaml")
    assert main(["train", str(whole)]) == 0
    path = write_config(_run_config(sd3_dir, tmp_path / "run"), tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0
    assert main(["train", str(path), "--resume", "auto", "--max-steps", "2"]) == 0
    assert len(drawn) == 4 and torch.equal(drawn[0], drawn[2])
    assert torch.equal(drawn[1], drawn[3])


def test_a_checkpoint_records_how_many_prompts_were_drawn_also_after_a_resume_changed_their_number(
    sd3_dir: Path, tmp_path: Path
) -> None:
    """prompt_position counts the prompts drawn so far: 2 in step 1, then 1 in step 2 of a resume with half the
    samples is 3 (not step x prompts per step = 2, which would draw a prompt of the sequence twice)."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("".join(f"a photo of {n} cats\n" for n in ("one", "two", "three", "four", "five")))
    out = tmp_path / "run"
    cfg = _run_config(sd3_dir, out)
    cfg["prompts"] = {"source": str(prompts)}
    cfg["log"]["keep_last"] = 5
    cfg["sampling"].update(samples_per_step=4, batch_size=4)
    path = write_config(cfg, tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0
    argv = ["--resume", "auto", "--max-steps", "2", "--set", "sampling.samples_per_step=2"]
    assert main(["train", str(path), *argv, "--set", "sampling.batch_size=2"]) == 0

    def position(step: int) -> int:
        state = out / "checkpoints" / f"step-00000{step}" / "trainer_state" / "state.json"
        return json.loads(state.read_text())["prompt_position"]

    assert (position(1), position(2)) == (2, 3)


def test_a_run_gives_its_trackers_the_flat_config_and_each_rows_metrics_and_finishes_them(
    sd3_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trackers log.trackers names are started with the run's config (dotted keys), get every step's metrics
    under the step of its metrics.jsonl row, and are finished at the end (tensorboard flushes its files then)."""
    from accelerate.tracking import GeneralTracker

    from imgalign.trainers.trainer import FlowGRPOTrainer

    class Recorder(GeneralTracker):
        name = "recorder"
        requires_logging_directory = False

        def __init__(self) -> None:
            super().__init__()
            self.config: dict[str, Any] = {}
            self.rows: list[tuple[int | None, dict[str, float]]] = []
            self.finished = False

        @property
        def tracker(self) -> Any:
            return self

        def store_init_configuration(self, values: dict[str, Any]) -> None:
            self.config = dict(values)

        def log(self, values: dict[str, float], step: int | None = None, **kwargs: Any) -> None:
            self.rows.append((step, dict(values)))

        def finish(self) -> None:
            self.finished = True

    rec = Recorder()
    monkeypatch.setattr(FlowGRPOTrainer, "_trackers", lambda self: [rec])
    out = tmp_path / "run"
    assert main(["train", str(write_config(_run_config(sd3_dir, out, steps=2), tmp_path / "c.yaml"))]) == 0
    assert rec.config["train.lr"] == 1e-3 and rec.config["sampling.group_size"] == 2
    assert [s for s, _ in rec.rows] == [r["step"] for r in metric_rows(out)] == [1, 2]
    assert rec.rows[1][1]["train/lr"] == metric_rows(out)[1]["train/lr"]
    assert rec.finished

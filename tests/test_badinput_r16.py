"""Bad-input round 16: `imgalign train --resume` with a changed config, `imgalign report --compare` with odd run
folders, and model folders given one level too high."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from imgalign.cli import main
from imgalign.trainers.testing import metric_rows, write_config
from imgalign.trainers.trainer import apply_optimizer_settings, lr_lambda_factory

torch.set_num_threads(1)


def _one_step_run(sd3_dir: Path, out: Path, **train: float) -> dict:
    """A one-step training config of the tiny SD3 pipeline (two samples, two steps), `train` settings added."""
    return {
        "model": {"path": str(sd3_dir)},
        "prompts": {"source": "shapes", "tasks": ["single_object"]},
        "sampling": {"num_steps": 2, "group_size": 2, "samples_per_step": 2, "batch_size": 2},
        "rewards": {"names": ["imgalign.trainers.testing:red_reward"]},
        "train": {"max_steps": 1, "lr": 1e-3, "micro_batch_size": 2, **train},
        "eval": {"every": -1},
        "log": {"output_dir": str(out), "sample_every": 0, "trackers": "none", "progress": False},
    }


def _adamw(lr: float, weight_decay: float) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """An AdamW over one weight and its warm-up LR schedule, as the trainer builds them (2 warm-up updates)."""
    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.AdamW([w], lr=lr, weight_decay=weight_decay)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda_factory(2, 10, "constant"))


def _saved_after_one_update() -> tuple[dict, dict]:
    opt, sched = _adamw(5e-5, 0.0)
    opt.param_groups[0]["params"][0].grad = torch.full((3,), 0.5)
    opt.step()
    sched.step()
    return opt.state_dict(), sched.state_dict()


def test_a_resumed_optimizer_takes_the_configs_lr_and_adamw_settings_and_keeps_its_moments():
    """A resume with another train.lr (or weight decay) warned of the change and then trained at the checkpoint's:
    the optimizer's and the scheduler's state dicts hold it. The config's settings apply, at the schedule position
    of the checkpoint, and the Adam moments stay."""
    opt_state, sched_state = _saved_after_one_update()
    opt, sched = _adamw(1e-3, 0.1)
    settings = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
    opt.load_state_dict(opt_state)
    sched.load_state_dict(sched_state)
    apply_optimizer_settings(opt, sched, settings)
    group = opt.param_groups[0]
    assert group["lr"] == pytest.approx(1e-3 * 1.0) and sched.get_last_lr() == [group["lr"]]  # warm-up done
    assert group["weight_decay"] == 0.1 and group["initial_lr"] == 1e-3
    moments = opt.state_dict()["state"][0]
    assert torch.equal(moments["exp_avg"], opt_state["state"][0]["exp_avg"]) and int(moments["step"]) == 1
    sched.step()  # the next updates follow the configured rate too
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-3)
    # the same config: the loaded rate, exactly (a resume is bitwise the uninterrupted run)
    same, same_sched = _adamw(5e-5, 0.0)
    settings = [{k: v for k, v in g.items() if k != "params"} for g in same.param_groups]
    same.load_state_dict(opt_state)
    same_sched.load_state_dict(sched_state)
    apply_optimizer_settings(same, same_sched, settings)
    assert same.param_groups[0]["lr"] == opt_state["param_groups"][0]["lr"]
    assert same_sched.get_last_lr() == sched_state["_last_lr"]


def test_a_resume_with_a_lower_lr_trains_at_it(sd3_dir, tmp_path):
    """`imgalign train --resume auto --set train.lr=...` (what the step-failure and approx-KL messages advise) logs and
    trains at the new rate from the first resumed step."""
    out = tmp_path / "run"
    cfg = _one_step_run(sd3_dir, out)
    path = write_config(cfg, tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0
    assert main(["train", str(path), "--resume", "auto", "--max-steps", "2", "--set", "train.lr=2e-4"]) == 0
    assert [(r["step"], r["train/lr"]) for r in metric_rows(out)] == [(1, 1e-3), (2, 2e-4)]


def _metrics_run(folder: Path, steps: range, evals: str | None = None) -> Path:
    """A run folder whose metrics.jsonl logs reward/r/mean at `steps` (and eval/s/overall at the last), and an
    eval.jsonl of the text `evals` when given."""
    folder.mkdir(parents=True)
    rows = [{"step": s, "reward/r/mean": 0.1 * s} for s in steps]
    rows[-1]["eval/s/overall"] = 0.5
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if evals is not None:
        (folder / "eval.jsonl").write_text(evals)
    return folder


def test_compare_refuses_a_run_named_twice_in_a_group_under_another_spelling(tmp_path, capsys, monkeypatch):
    """`--compare a=run,run/` (or the absolute path) passed the duplicate check, which compared the strings: the
    run counted twice in the group's mean ("mean of 2")."""
    run = _metrics_run(tmp_path / "run", range(1, 4))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "cmp"
    for spelt in ("run/", "./run", str(run)):
        argv = ["report", "--compare", f"a=run,{spelt}", "--keys", "reward/r/mean", "--out", str(out)]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"names run 'run' twice ('run' and {spelt!r}); give each run of a group once" in err
    assert not out.exists()
    # the same run in two groups is an overlay, not a double count
    assert main(["report", "--compare", "a=run", "b=run/", "--keys", "reward/r/mean", "--out", str(out)]) == 0


def test_compare_leaves_out_a_cut_off_eval_log_as_the_single_run_report_does(tmp_path, capsys, caplog):
    """A run whose eval.jsonl holds only a line cut short stopped the whole comparison with "holds no metrics rows
    ... a training run writes one per step" (about the evaluation log); `imgalign report RUN` leaves it out with a
    warning. The comparison now does too, and takes the evaluations its metrics rows carry."""
    run = _metrics_run(tmp_path / "run", range(1, 4), evals='{"step": 0, "eval/s/ove')
    out = tmp_path / "cmp"
    argv = ["report", "--compare", f"a={run}", "--keys", "reward/r/mean", "eval/s/overall", "--out", str(out)]
    assert main(argv) == 0
    md = (out / "compare.md").read_text()
    assert (
        "| a | `run` | `reward/r/mean` | 0.1 | 0.3 |" in md
        and "| a | `run` | `eval/s/overall` | 0.5 | 0.5 |" in md
    )
    assert "eval.jsonl holds no evaluation rows (its only line is incomplete)" in caplog.text
    assert "one per step" not in caplog.text


def test_a_folder_holding_the_pipeline_one_level_down_names_it(tmp_path, capsys):
    """init_from (or --model) given the --out of `imgalign world pretrain` ("a folder this command wrote", in the
    README) said only that it is no pipeline folder; the message now names the pipeline folder inside it (not the
    .tmp copy of an interrupted write)."""
    out = tmp_path / "pretrained"
    for name in ("shapes-t2i", "shapes-t2i.tmp"):
        (out / name).mkdir(parents=True)
        (out / name / "model_index.json").write_text("{}")
    argv = [
        "world",
        "pretrain",
        "--component",
        "t2i",
        "--out",
        str(tmp_path / "new"),
        "--set",
        f"init_from={out}",
    ]
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"it holds the pipeline folder '{out / 'shapes-t2i'}': give that" in err
    assert not (tmp_path / "new" / "shapes-t2i").exists()


def test_report_names_the_run_folder_of_a_folder_inside_it_and_of_its_metrics_file(tmp_path, capsys):
    """`imgalign report RUN/checkpoints` (or RUN/report, RUN/samples) said only that metrics.jsonl is missing there,
    and `--compare a=RUN/metrics.jsonl` that RUN/metrics.jsonl/metrics.jsonl does not exist; both name RUN now."""
    run = _metrics_run(tmp_path / "run", range(1, 3))
    for sub in ("checkpoints", "report", "samples"):
        (run / sub).mkdir()
        assert main(["report", str(run / sub)]) == 2
        assert f"'{run / sub}' is inside the run folder '{run}': give that" in capsys.readouterr().err
    argv = ["report", "--compare", f"a={run / 'metrics.jsonl'}", "--keys", "reward/r/mean"]
    assert main([*argv, "--out", str(tmp_path / "cmp")]) == 2
    assert (
        f"'{run / 'metrics.jsonl'}' is a file: give the run folder that holds it, '{run}'"
        in capsys.readouterr().err
    )


def test_a_resume_that_turns_the_ema_on_starts_it_from_the_checkpoints_weights(sd3_dir, tmp_path, caplog):
    """A checkpoint trained with train.ema_decay 0 has no ema.safetensors: a resume with an EMA called it damaged
    ("restore the file from a copy, or train again from the start"). The EMA now starts at the resumed weights: after
    one more update it is decay x those + (1 - decay) x the new ones."""
    from safetensors.torch import load_file

    out = tmp_path / "run"
    cfg = _one_step_run(sd3_dir, out, ema_decay=0.0)
    path = write_config(cfg, tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0
    argv = ["train", str(path), "--resume", "auto", "--max-steps", "2", "--set", "train.ema_decay=0.75"]
    assert main(argv) == 0
    assert "was trained without an EMA: the EMA starts from its weights" in caplog.text
    state = [out / "checkpoints" / f"step-00000{k}" / "trainer_state" for k in (1, 2)]
    before, after = (load_file(str(s / "trainable.safetensors")) for s in state)
    ema = load_file(str(state[1] / "ema.safetensors"))
    name = next(n for n in ema if not torch.equal(before[n], after[n]))  # a weight the update moved
    assert torch.allclose(ema[name], 0.75 * before[name] + 0.25 * after[name], atol=1e-6)


def test_compare_says_when_a_groups_runs_share_no_span_for_a_mean(tmp_path):
    """A group of a run and its continuation in another folder (steps 1-2, then 5-6) has no span every run logs: the
    legend said "mean of 2" of a line that was not drawn, and compare.md said nothing."""
    first = _metrics_run(tmp_path / "first", range(1, 3))
    later = _metrics_run(tmp_path / "later", range(5, 7))
    both = _metrics_run(tmp_path / "both", range(1, 7))
    out = tmp_path / "cmp"
    argv = ["report", "--compare", f"a={first},{later}", f"b={both},{first}", "--keys", "reward/r/mean"]
    assert main([*argv, "--out", str(out)]) == 0
    md = (out / "compare.md").read_text()
    assert "No group mean for a (`reward/r/mean`): the group's runs share no `step` span" in md
    assert "b (`reward/r/mean`)" not in md  # b's runs overlap at steps 1-2

"""`imgalign train` end to end on tiny random SD3 / FLUX pipelines: smoke runs (every trainable parameter changes,
metrics logged), bad input caught before any model loads, NaN rewards masked, checkpoints loadable, resume after
SIGKILL bitwise equal, and two accelerate processes giving the same advantages as one."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from imgalign.cli import main
from imgalign.trainers.testing import metric_rows as rows
from imgalign.trainers.testing import tiny_flux_pipeline
from imgalign.trainers.testing import transformer_weights as initial_trainable
from imgalign.trainers.testing import write_config as write

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def flux_dir(tmp_path_factory):
    return tiny_flux_pipeline(tmp_path_factory.mktemp("flux"))


def tiny_config(model: Path, out: Path, **over) -> dict:
    cfg = {
        "model": {"path": str(model)},
        "prompts": {"source": "shapes", "tasks": ["single_object", "colors"]},
        "sampling": {"num_steps": 3, "group_size": 2, "samples_per_step": 4, "batch_size": 4},
        "rewards": {"names": ["imgalign.trainers.testing:red_reward"]},
        "objective": {"clip_range": 0.2},
        "train": {"max_steps": 2, "lr": 1e-3, "micro_batch_size": 2, "updates_per_step": 1},
        "eval": {"every": -1},
        "log": {"output_dir": str(out), "sample_every": 1, "trackers": "none", "progress": False},
    }
    for key, val in over.items():
        sect, name = key.split("__")
        cfg[sect][name] = val
    return cfg


def test_sd3_full_finetune_two_steps(sd3_dir, tmp_path, capsys):
    out = tmp_path / "run"
    cfg = tiny_config(sd3_dir, out, objective__kl_beta=0.01, train__ema_decay=0.5)
    cfg["objective"].update(penalty="vnorm", penalty_weight=0.1)  # the velocity-norm hinge composes with GRPO
    cfg = write(cfg, tmp_path / "c.yaml")
    assert main(["train", str(cfg)]) == 0
    assert f"curves and a summary: imgalign report {out}" in capsys.readouterr().out
    r = rows(out)
    assert [x["step"] for x in r] == [1, 2]
    for key in (
        "reward/red_reward/mean",
        "policy/approx_kl",
        "policy/clipfrac",
        "policy/kl",
        "policy/ratio_mean",
        "train/zero_std_ratio",
        "train/grad_norm",
        "perf/nfe",
        "perf/sec_rollout",
        "perf/sec_train",
    ):
        assert key in r[0] and r[0][key] == r[0][key], key
    # on-policy first update: ratio == 1 and the KL to the base is 0 at initialisation
    assert abs(r[0]["policy/ratio_mean"] - 1) < 1e-4 and r[0]["policy/clipfrac"] == 0
    assert r[0]["policy/kl"] < 1e-8 and r[1]["policy/kl"] > 0
    assert r[0]["policy/vnorm_ratio"] == pytest.approx(1.0, abs=1e-5) and r[0]["policy/penalty"] == 0.0
    # exact NFE count: 4 samples x 3 steps x 1 (no CFG)
    assert r[0]["perf/nfe"] == 12
    assert [x["perf/nfe_total"] for x in r] == [12, 24]  # the run's total so far
    # seconds: the phases of a step lie within it, and the steps within the run's total so far
    for x in r:
        assert x["perf/sec_rollout"] + x["perf/sec_reward"] + x["perf/sec_train"] <= x["perf/sec_step"]
    assert r[0]["perf/sec_step"] <= r[0]["perf/sec_total"]
    assert r[0]["perf/sec_step"] + r[1]["perf/sec_step"] <= r[1]["perf/sec_total"]
    ckpt = out / "checkpoints" / "step-000002"
    assert (ckpt / "model_index.json").is_file() and (ckpt / "trainer_state" / "state.json").is_file()
    raw = load_file(str(ckpt / "trainer_state" / "trainable.safetensors"))
    init = initial_trainable(sd3_dir)
    unchanged = [n for n, t in raw.items() if torch.equal(t, init[n])]
    assert not unchanged, f"parameters that did not change: {unchanged[:5]}"
    from diffusers import StableDiffusion3Pipeline

    pipe = StableDiffusion3Pipeline.from_pretrained(str(ckpt), text_encoder_3=None, tokenizer_3=None)
    ema = load_file(str(ckpt / "trainer_state" / "ema.safetensors"))
    name = next(iter(ema))
    torch.testing.assert_close(pipe.transformer.state_dict()[name], ema[name])  # the export holds the EMA
    assert (out / "samples" / "step-000001.png").is_file() and (out / "config.yaml").is_file()
    assert json.loads((ckpt / "trainer_state" / "state.json").read_text())["exported_weights"] == "ema"


def test_flux_lora_two_steps(flux_dir, tmp_path, monkeypatch):
    out = tmp_path / "run"
    monkeypatch.chdir(flux_dir.parent)  # the model given relative to the working directory, as users often do
    cfg = tiny_config(
        Path(flux_dir.name),
        out,
        model__lora_rank=2,
        model__max_sequence_length=16,
        sampling__guidance_scale=3.5,
    )
    cfg["sampling"]["kernel"] = "cps"
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("".join(f"a photo of {n} cats\n" for n in ("one", "two", "three", "four", "five")))
    cfg["prompts"] = {"source": str(prompts), "test_fraction": 0.4}
    cfg["eval"] = {"every": 0, "suite": "reward", "images_per_prompt": 1, "num_steps": 2}
    cfg["log"]["sample_every"] = 2
    assert main(["train", str(write(cfg, tmp_path / "c.yaml"))]) == 0
    r = rows(out)
    assert len(r) == 2 and r[0]["perf/nfe"] == 12  # guidance-distilled: one forward per step
    # sample grids every 2 steps from the first, named by the metrics row: steps 1, 3, ...
    assert sorted(p.name for p in (out / "samples").glob("step-*.png")) == ["step-000001.png"]
    assert abs(r[0]["policy/ratio_mean"] - 1) < 1e-4  # the CPS kernel is on-policy through the trainer
    assert "eval/reward/red_reward/mean" in r[1]  # evaluated on the 2 held-out prompts at the end
    # only at the end (eval.every 0, no eval.at_start), named by the step it follows, as the checkpoint is
    assert [json.loads(x)["step"] for x in (out / "eval.jsonl").read_text().splitlines()] == [2]
    assert [p.name for p in (out / "samples").glob("eval-step-*.png")] == ["eval-step-000002.png"]
    assert r[1]["perf/sec_eval"] > 0 and "perf/sec_eval" not in r[0]
    # 2 prompts x 4 seeds
    assert r[1]["eval/prompt_dependence/seed"] > 0 and r[1]["eval/prompt_dependence/ratio"] >= 0
    ckpt = out / "checkpoints" / "step-000002"
    raw = load_file(str(ckpt / "trainer_state" / "trainable.safetensors"))
    assert raw and all("lora_" in n for n in raw)
    # the checkpoint names its base by an absolute path, so it loads from any working directory
    assert json.loads((ckpt / "imgalign_model.json").read_text())["base_model"] == str(flux_dir.resolve())
    from imgalign.adapters import load_adapter

    fresh = load_adapter(flux_dir, max_sequence_length=16)
    fresh.add_lora(2, 4.0, init_seed=0)
    init = {n: p.detach().clone() for n, p in fresh.trainable_named_parameters()}
    unchanged = [n for n, t in raw.items() if torch.equal(t, init[n])]
    assert not unchanged, f"parameters that did not change: {unchanged[:5]}"
    # diffusers' own loader on the LoRA checkpoint, into a pipeline without an adapter (as a user would): it holds
    # exactly the trained LoRA weights
    user = load_adapter(flux_dir, max_sequence_length=16).pipe
    user.load_lora_weights(str(ckpt))
    loaded = {n.replace(".default_0", ""): p for n, p in user.transformer.named_parameters() if "lora_" in n}
    trained = {n.replace(".default", ""): t for n, t in raw.items()}
    assert loaded.keys() == trained.keys()
    assert all(torch.equal(loaded[n].detach().float(), t.float()) for n, t in trained.items())


def _no_model_load(monkeypatch) -> None:
    """Loading a model fails the test: the errors under test must come before any model loads."""
    import imgalign.adapters as adapters

    def boom(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(adapters, "load_adapter", boom)


def _refused(cfg: dict, tmp_path, capsys) -> str:
    """Train `cfg`, which must stop with exit code 2 (an input refused); what it printed to stderr."""
    assert main(["train", str(write(cfg, tmp_path / "c.yaml"))]) == 2
    return capsys.readouterr().err


def _user_module(tmp_path, monkeypatch, name: str, text: str) -> None:
    """The user's plug-in module `name`.py, importable as a `package.module:attr` path would need it."""
    (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))


def test_bad_input_fails_before_model_loads(sd3_dir, tmp_path, capsys, monkeypatch):
    _no_model_load(monkeypatch)
    base = tiny_config(sd3_dir, tmp_path / "run")
    incomplete = tmp_path / "incomplete"  # a pipeline folder whose components are missing
    incomplete.mkdir()
    (incomplete / "model_index.json").write_bytes((sd3_dir / "model_index.json").read_bytes())
    lora = tmp_path / "lora_ckpt"  # what a LoRA run's checkpoint holds: adapter weights naming their base
    lora.mkdir()
    (lora / "pytorch_lora_weights.safetensors").write_bytes(
        b"stub"
    )  # not empty: an empty weights file is refused first
    (lora / "imgalign_model.json").write_text(json.dumps({"base_model": str(sd3_dir)}))
    txt = tmp_path / "p.txt"
    txt.write_text("a photo of a circle\n")
    typo = tmp_path / "typo.jsonl"
    typo.write_text(
        json.dumps({"tag": "single_object", "prompt": "a cirlce", "include": [{"class": "cirlce"}]})
    )
    geneval = {"names": ["geneval"]}
    cases = [
        ({"sampling": {**base["sampling"], "group_size": 3}}, "does not divide"),
        (
            {"prompts": {"source": str(txt)}, "rewards": geneval},
            "'a photo of a circle' has no GenEval metadata",
        ),
        ({"prompts": {"source": str(typo)}, "rewards": geneval}, "include[0].class 'cirlce' is not a shape"),
        (
            {"prompts": {"source": str(txt), "test_fraction": 0.5}, "eval": {"every": 0, "suite": "reward"}},
            "has a single distinct prompt",
        ),
        ({"prompts": {"source": "generate:-1"}}, "must be 0 or more"),
        ({"prompts": {"source": "no_such_prompts.jsonl"}}, "a relative path is read from the working folder"),
        ({"rewards": {"names": ["no_such_reward"]}}, "unknown reward 'no_such_reward'"),
        (  # one reward written two ways (geneval's default mode is partial) would train twice
            {"rewards": {"names": ["geneval", "geneval: mode=partial"]}},
            "rewards.names: 'geneval' and 'geneval: mode=partial' are the same reward with the same options",
        ),
        (
            {"rewards": {"names": ["geneval", "fid:mode=group"]}},
            "which no group-relative advantage can learn",
        ),
        ({"model": {"path": str(tmp_path / "missing")}}, "does not exist"),
        ({"model": {"path": str(incomplete)}}, "is incomplete; missing:"),
        ({"model": {"path": str(lora)}}, "is a LoRA checkpoint of base model"),
        (  # eval/grid's BASE+OVERLAY was called a folder that does not exist
            {"model": {"path": f"{sd3_dir}+{lora}"}},
            "training takes one model, not BASE+OVERLAY; give the base model",
        ),
        ({"model": {"path": str(sd3_dir), "family": "sdxl"}}, "unknown model family"),
        (  # a family other than the folder's failed with a traceback inside the adapter
            {"model": {"path": str(sd3_dir), "family": "flux"}},
            f"model.family=flux, but model.path {str(sd3_dir)!r} holds a sd3 pipeline (its model_index.json)",
        ),
        ({"log": {**base["log"], "output_dir": " "}}, "log.output_dir is empty: give a run folder"),
        (
            {"model": {"path": str(sd3_dir), "lora_rank": 2, "lora_targets": []}},
            "model.lora_targets is empty",
        ),
        (
            {"model": {"path": str(sd3_dir), "lora_rank": 2, "lora_alpha": -8.0}},
            "model.lora_alpha must be >= 0",
        ),
        (  # inf x the zero-initialised LoRA B: NaN outputs from the first rollout
            {"model": {"path": str(sd3_dir), "lora_rank": 2, "lora_alpha": float("inf")}},
            "model.lora_alpha must be >= 0 and finite (got inf)",
        ),
        ({"objective": {"name": "dpo"}}, "unknown objective 'dpo'"),
        ({"eval": {"every": 0, "images_per_prompt": 0}}, "eval.images_per_prompt must be >= 1"),
        ({"objective": {"adv_clip": -1.0}}, "objective.adv_clip must be >= 0"),
        ({"log": {**base["log"], "trackers": "dvclive"}}, "log.trackers: dvclive is not installed"),
        ({"model": {"path": str(sd3_dir), "dtype": "bfloat16"}}, "Set train.mixed_precision=bf16"),
        ({"train": {**base["train"], "bogus": 1}}, "bogus"),
        (
            {"model": {"path": str(sd3_dir), "trainable_modules": ["ff_context["]}},
            "not a valid regular expression",
        ),
        ({"log": {**base["log"], "output_dir": str(txt / "run")}}, f"'{txt}' is a file, not a folder"),
        ({"log": {**base["log"], "output_dir": "/proc/imgalign-run"}}, "cannot write in '/proc'"),
    ]
    for patch, msg in cases:
        cfg = {**base, **patch}
        assert main(["train", str(write(cfg, tmp_path / "bad.yaml"))]) == 2
        assert msg in capsys.readouterr().err, msg
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_preflight_gives_the_model_folder_absolute_and_takes_what_is_no_overlay(
    sd3_dir, tmp_path, monkeypatch
):
    """preflight returns a relative model folder as its absolute path (LoRA checkpoints record it as their base); a
    folder whose name holds a '+' is a model, not BASE+OVERLAY, even when the part after it names a folder; and a
    pipeline class imgalign does not know is trained with the adapter model.family picks."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import preflight

    monkeypatch.chdir(tmp_path)
    (tmp_path / "ck").mkdir()
    plus = tmp_path / "base+ck"
    shutil.copytree(sd3_dir, plus)
    custom = tmp_path / "custom"
    shutil.copytree(sd3_dir, custom)
    index = json.loads((custom / "model_index.json").read_text())
    (custom / "model_index.json").write_text(json.dumps({**index, "_class_name": "MyOwnPipeline"}))

    def checked(path: str, *over: str) -> str:
        cfg = load_config(FlowGRPOConfig, None, [f"model.path={path}", "log.output_dir=run", *over])
        return preflight(cfg)

    assert checked("base+ck") == str(plus)
    assert checked("custom", "model.family=sd3") == str(custom)


def _state_only_checkpoint(path: Path, step: int, num_processes: int = 1) -> Path:
    """A checkpoint folder holding only its trainer_state/state.json (what resume resolution reads)."""
    (path / "trainer_state").mkdir(parents=True)
    state = {"step": step, "num_processes": num_processes}
    (path / "trainer_state" / "state.json").write_text(json.dumps(state))
    return path


def test_resume_auto_puts_back_a_checkpoint_left_only_as_its_old_copy(tmp_path):
    """A save killed between its renames leaves step-N.old as the only copy of step N: --resume auto puts it back
    and continues from it (not from the step before)."""
    from imgalign.trainers.trainer import FlowGRPOTrainer
    from tests.conftest import resume_stub

    out = tmp_path / "run"
    _state_only_checkpoint(out / "checkpoints" / "step-000001", 1)
    _state_only_checkpoint(out / "checkpoints" / "step-000002.old", 2)
    tr = resume_stub(out)
    assert FlowGRPOTrainer._resolve_resume(tr, "auto") == out / "checkpoints" / "step-000002"
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-000001", "step-000002"]


def test_resume_auto_says_which_newer_step_folder_it_passed_over(tmp_path, caplog):
    """A step folder whose trainer_state/state.json is gone (deleted, or a copy of the run still being made) was
    passed over by --resume auto without a word: the run went on from an older checkpoint and replaced it."""
    from imgalign.trainers.trainer import FlowGRPOTrainer
    from tests.conftest import resume_stub

    out = tmp_path / "run"
    first = _state_only_checkpoint(out / "checkpoints" / "step-000001", 1)
    (out / "checkpoints" / "step-000002" / "transformer").mkdir(parents=True)
    tr = resume_stub(out)
    with caplog.at_level("WARNING", logger="imgalign"):
        assert FlowGRPOTrainer._resolve_resume(tr, "auto") == first
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(said) == 1 and "step-000002 has no trainer_state/state.json" in said[0]
    assert f"resuming from {first}" in said[0]


def test_a_checkpoint_of_another_process_count_is_refused_before_anything_loads(tmp_path):
    """A checkpoint written by 2 processes cannot continue in 1 (its RNG files and prompt shares are per process)."""
    from types import SimpleNamespace

    from imgalign.config import ConfigError
    from imgalign.trainers.trainer import FlowGRPOTrainer

    ckpt = _state_only_checkpoint(tmp_path / "checkpoints" / "step-000003", 3, num_processes=2)
    tr = SimpleNamespace(resume_from=ckpt, world=1)
    with pytest.raises(ConfigError, match="was written by 2 processes; resume with the same number"):
        FlowGRPOTrainer._check_resume_fits(tr)
    tr.world = 2
    # no saved config.yaml (an older checkpoint): _load compares the weights
    FlowGRPOTrainer._check_resume_fits(tr)


def test_trainable_modules_trains_only_the_matching_weights(sd3_dir, tmp_path, capsys):
    out = tmp_path / "run"
    pats = ["context_embedder", "norm1_context"]
    cfg = tiny_config(sd3_dir, out, model__trainable_modules=pats)
    assert main(["train", str(write(cfg, tmp_path / "c.yaml"))]) == 0
    ckpt = out / "checkpoints" / "step-000002"
    raw = load_file(str(ckpt / "trainer_state" / "trainable.safetensors"))
    init = initial_trainable(sd3_dir)
    assert raw and all(any(p in n for p in pats) for n in raw), sorted(raw)[:5]
    assert {n for n in init if any(p in n for p in pats)} == set(raw)  # every matching weight trains
    assert not [n for n, t in raw.items() if torch.equal(t, init[n])]
    from diffusers import StableDiffusion3Pipeline

    exported = StableDiffusion3Pipeline.from_pretrained(str(ckpt), text_encoder_3=None, tokenizer_3=None)
    frozen = {n: t for n, t in exported.transformer.state_dict().items() if n not in raw}
    assert frozen and all(torch.equal(t, init[n]) for n, t in frozen.items())  # the rest is the base model
    # a pattern that matches no weight is refused with the names it could have matched
    cfg = tiny_config(sd3_dir, tmp_path / "run2", model__trainable_modules=["no_such_module"])
    assert main(["train", str(write(cfg, tmp_path / "c2.yaml"))]) == 2  # a clear error, no traceback
    assert "matches none of the" in capsys.readouterr().err


def test_logged_lr_is_the_rate_of_the_steps_update(sd3_dir, tmp_path):
    """train/lr is the rate the step's update used: warm-up over 2 updates gives lr/2 then lr (it logged the next
    update's rate)."""
    out = tmp_path / "run"
    cfg = tiny_config(sd3_dir, out, train__warmup_steps=2)
    cfg["log"].update(checkpoint_every=1, keep_last=1)
    assert main(["train", str(write(cfg, tmp_path / "c.yaml"))]) == 0
    assert [r["train/lr"] for r in rows(out)] == pytest.approx([5e-4, 1e-3])
    # log.keep_last 1: the trainer keeps only the newest of its checkpoints
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-000002"]
    state = json.loads((out / "checkpoints" / "step-000002" / "trainer_state" / "state.json").read_text())
    assert state["exported_weights"] == "raw"  # no EMA: the export holds the trained weights
    assert not (out / "rollouts.jsonl").exists()  # log.save_rollouts is off by default


def test_checkpoints_every_n_steps_are_named_by_the_step_they_end_and_the_last_step_is_saved(
    sd3_dir, tmp_path
):
    out = tmp_path / "run"
    cfg = tiny_config(sd3_dir, out, train__max_steps=3, sampling__num_steps=2)
    cfg["log"].update(checkpoint_every=2, keep_last=5, sample_every=0)
    assert main(["train", str(write(cfg, tmp_path / "c.yaml"))]) == 0
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-000002", "step-000003"]


def test_lr_schedule_warms_up_linearly_then_holds_or_follows_the_cosine_to_zero():
    """The LR factor of optimizer update k: (k + 1) / warmup during the warm-up, then 1 (constant) or the half
    cosine over the updates after it, reaching 0 at update `total` (one past the last)."""
    from imgalign.trainers.trainer import lr_lambda_factory

    const = lr_lambda_factory(3, 10, "constant")
    assert [const(k) for k in range(5)] == pytest.approx([1 / 3, 2 / 3, 1.0, 1.0, 1.0])
    cos = lr_lambda_factory(2, 6, "cosine")
    c = math.cos
    expected = [0.5, 1.0, 1.0, 0.5 * (1 + c(math.pi / 4)), 0.5, 0.5 * (1 + c(3 * math.pi / 4)), 0.0, 0.0]
    assert [cos(k) for k in range(8)] == pytest.approx(expected, abs=1e-12)
    assert [lr_lambda_factory(0, 2, "cosine")(k) for k in range(3)] == pytest.approx(
        [1.0, 0.5, 0.0], abs=1e-12
    )


def test_the_config_hash_leaves_out_where_a_run_logs_and_what_a_resume_may_change():
    """A checkpoint's config hash (a resume warns when it differs) ignores the log section and
    train.time_budget_min; train.max_steps too under a constant schedule, but not under a cosine one, which decays
    over it. Any other setting changes it."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import config_hash

    def hashed(*over: str) -> str:
        return config_hash(load_config(FlowGRPOConfig, None, list(over)))

    base = hashed()
    assert hashed("log.output_dir=elsewhere", "log.checkpoint_every=7", "train.time_budget_min=5") == base
    assert hashed("train.max_steps=123") == base
    assert hashed("train.lr=0.5") != base
    cosine = hashed("train.lr_schedule=cosine")
    assert cosine != base and hashed("train.lr_schedule=cosine", "train.max_steps=123") != cosine
    assert hashed("train.lr_schedule=cosine", "train.time_budget_min=5") == cosine


def test_setup_builds_the_optimizer_schedule_lora_and_reward_weights_from_the_config(sd3_dir, tmp_path):
    """AdamW takes train.lr, adam_beta1/2, adam_eps and weight_decay; the cosine decays over every optimizer update
    of the run (max_steps x updates_per_step); model.lora_alpha 0 is 2 x rank; rewards.weights weight the rewards
    (each one 1 when not given)."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import FlowGRPOTrainer

    cfg_d = tiny_config(sd3_dir, tmp_path / "run", train__max_steps=2)
    cfg_d["model"].update(lora_rank=2)
    cfg_d["train"].update(
        updates_per_step=2,
        warmup_steps=0,
        lr_schedule="cosine",
        adam_beta1=0.8,
        adam_beta2=0.9,
        adam_eps=1e-6,
        weight_decay=0.25,
    )
    cfg_d["rewards"].update(
        names=["imgalign.trainers.testing:red_reward", "imgalign.trainers.testing:RunningMeanReward"],
        weights=[1.0, 3.0],
    )
    tr = FlowGRPOTrainer(load_config(FlowGRPOConfig, write(cfg_d, tmp_path / "c.yaml")), tmp_path / "run")
    tr.setup()
    group = tr.optimizer.param_groups[0]
    assert (group["lr"], group["betas"], group["eps"], group["weight_decay"]) == (
        1e-3,
        (0.8, 0.9),
        1e-6,
        0.25,
    )
    factors = [tr.scheduler.lr_lambdas[0](k) for k in range(5)]  # the half cosine over 2 x 2 updates
    assert factors == pytest.approx(
        [1.0, 0.5 * (1 + math.cos(math.pi / 4)), 0.5, 0.5 * (1 - math.cos(math.pi / 4)), 0.0]
    )
    assert tr.adapter.lora_config["alpha"] == 4.0
    assert tr.reward_weights.tolist() == [1.0, 3.0]


def test_a_full_fine_tune_keeps_a_reference_copy_for_the_evaluations_vnorm_alone(sd3_dir, tmp_path):
    """Without KL, penalty or anchor the objective needs no reference; eval.vnorm_images > 0 still measures
    ||v_theta|| / ||v_ref|| at every evaluation, so the frozen copy is kept (else the evaluation raised). With the
    evaluation off (eval.every=-1) it is not: a full fine-tune held a second copy of the transformer for nothing."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import FlowGRPOTrainer

    for vnorm, every in ((0, 0), (2, 0), (2, -1)):
        cfg_d = tiny_config(sd3_dir, tmp_path / f"run{vnorm}{every}", objective__kl_beta=0.0)
        cfg_d["eval"].update(vnorm_images=vnorm, every=every)
        tr = FlowGRPOTrainer(
            load_config(FlowGRPOConfig, write(cfg_d, tmp_path / "c.yaml")), tmp_path / f"run{vnorm}{every}"
        )
        tr.setup()
        assert not tr.objective.needs_reference
        assert (tr.adapter._reference is not None) == (vnorm > 0 and every >= 0)
        if tr.adapter._reference is not None:
            with tr.adapter.reference() as ref:
                assert ref is not tr.adapter.transformer


def test_a_bf16_full_fine_tune_loads_with_one_dtype_as_documented(sd3_dir, tmp_path):
    """model.dtype bfloat16: the export holds bf16 frozen parts and the float32 trained transformer; as the README
    says, from_pretrained(dir, dtype=torch.bfloat16) loads one dtype that runs (without a dtype it fed
    bf16 text embeddings into float32 layers); the raw weights for resuming stay float32. It follows a float32 run
    in the same process, as a library caller may."""
    from accelerate.state import AcceleratorState
    from diffusers import StableDiffusion3Pipeline

    out = tmp_path / "run"
    cfg = tiny_config(
        sd3_dir, out, train__max_steps=1, train__mixed_precision="bf16", model__dtype="bfloat16"
    )
    # as a fresh process (earlier tests built trainers)
    AcceleratorState._reset_state(reset_partial_state=True)
    # a float32 run first, in the same process: a run clears the accelerate state it created, so the bf16 run
    # that follows is not refused ("AcceleratorState has already been initialized and cannot be changed")
    f32 = tiny_config(sd3_dir, tmp_path / "f32", train__max_steps=1)
    assert main(["train", str(write(f32, tmp_path / "f32.yaml"))]) == 0
    assert not AcceleratorState._shared_state
    assert main(["train", str(write(cfg, tmp_path / "c.yaml"))]) == 0
    ckpt = out / "checkpoints" / "step-000001"
    pipe = StableDiffusion3Pipeline.from_pretrained(
        str(ckpt), text_encoder_3=None, tokenizer_3=None, dtype=torch.bfloat16
    )
    size = pipe.default_sample_size * pipe.vae_scale_factor
    image = pipe("a red circle", num_inference_steps=1, height=size, width=size).images[0]
    assert image.size == (size, size)
    raw = load_file(str(ckpt / "trainer_state" / "trainable.safetensors"))
    assert {t.dtype for t in raw.values()} == {torch.float32}


def test_nan_reward_is_masked(sd3_dir, tmp_path, caplog, capsys):
    out = tmp_path / "run"
    cfg = tiny_config(sd3_dir, out, rewards__names=["imgalign.trainers.testing:nan_every_third_reward"])
    cfg["sampling"].update(samples_per_step=6, group_size=3, batch_size=6)
    cfg["log"]["save_rollouts"] = True
    with caplog.at_level("WARNING"):
        assert main(["train", str(write(cfg, tmp_path / "c.yaml"))]) == 0
    assert "nan_every_third_reward" in caplog.text and "non-finite" in caplog.text
    # the end-of-run summary says so too, naming the reward
    done = capsys.readouterr().out.split("done:")[-1]
    assert (
        "WARNING: samples masked for a non-finite" in done
        and "nan_every_third_reward 4 in 2 of 2 steps" in done
    )
    r = rows(out)
    assert r[0]["reward/nan_every_third_reward/nonfinite"] == 2
    # 2 finite rewards in each group of 3: 4 of 6 samples valid, their advantages +-std / (std + eps) (population
    # std of two), just under 1; the mean |advantage| is over the valid ones only (over all 6 it is at most 4/6)
    assert r[0]["train/valid_ratio"] == pytest.approx(4 / 6)
    assert 4 / 6 < r[0]["train/adv_abs_mean"] <= 1.0
    saved = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
    assert [x["valid"] for x in saved] == [
        math.isfinite(x["rewards"]["nan_every_third_reward"]) for x in saved
    ]
    assert sum(x["valid"] for x in saved) == 8  # 4 of 6 in each of 2 steps
    w = load_file(str(out / "checkpoints" / "step-000002" / "trainer_state" / "trainable.safetensors"))
    assert all(torch.isfinite(t).all() for t in w.values())


def test_a_nan_score_of_a_reward_with_weight_0_masks_no_sample(sd3_dir, tmp_path, caplog, capsys):
    """A reward of weight 0 is only logged: its NaN scores are counted (reward/<name>/nonfinite) but mask no sample
    (reward/<name>/masked 0, every sample valid), its warning says so and the end-of-run summary warns of no
    masking. It used to mask a third of the samples here (and a reward NaN on every sample stopped all training)."""
    out = tmp_path / "run"
    cfg = tiny_config(
        sd3_dir,
        out,
        rewards__names=[
            "imgalign.trainers.testing:brightness_reward",
            "imgalign.trainers.testing:nan_every_third_reward",
        ],
        rewards__weights=[1.0, 0.0],
        train__max_steps=1,
    )
    cfg["sampling"].update(samples_per_step=6, group_size=3, batch_size=6)
    with caplog.at_level("WARNING"):
        assert main(["train", str(write(cfg, tmp_path / "c.yaml"))]) == 0
    assert "'nan_every_third_reward' returned 2 non-finite score(s)" in caplog.text
    assert "it has weight 0 (logged only), so no sample is masked for them" in caplog.text
    assert "samples masked" not in capsys.readouterr().out.split("done:")[-1]
    (r,) = rows(out)
    assert (
        r["reward/nan_every_third_reward/nonfinite"] == 2 and r["reward/nan_every_third_reward/masked"] == 0
    )
    assert r["reward/brightness_reward/masked"] == 0
    assert r["train/valid_ratio"] == 1.0


@pytest.mark.parametrize(("suite", "held"), [("shapes", 0), ("reward", 1)])
def test_prompts_are_held_out_only_for_the_reward_suite(sd3_dir, tmp_path, suite, held):
    """Only eval.suite=reward scores held-out prompts; under the shapes suite a 2-prompt file trains on both."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import FlowGRPOTrainer

    f = tmp_path / "p.txt"
    f.write_text("a photo of a red circle\na photo of a blue square\n")
    cfg_d = tiny_config(sd3_dir, tmp_path / "run")
    cfg_d["prompts"] = {"source": str(f), "test_fraction": 0.1}
    cfg_d["eval"] = {"every": -1, "suite": suite}
    tr = FlowGRPOTrainer(load_config(FlowGRPOConfig, write(cfg_d, tmp_path / "c.yaml")), tmp_path / "run")
    tr.setup()
    assert len(tr.sampler.test) == held
    assert len({p for p, _ in tr.sampler.train}) == 2 - held


def test_a_step_samples_each_prompt_as_a_group_with_its_own_noise(sd3_dir, tmp_path):
    """train_step(k): the rollout gets step k (its noise), each of the step's prompts G times in a row (with its
    metadata) and those samples' global ids, and the balancer groups the samples alike (sample i in group i // G);
    a (plug-in) balancer's own metrics reach the row. log.sample_every 0 saves no sample grid."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import FlowGRPOTrainer

    cfg_d = tiny_config(sd3_dir, tmp_path / "run", sampling__samples_per_step=6, sampling__batch_size=6)
    cfg_d["sampling"]["group_size"] = 3
    cfg_d["log"]["sample_every"] = 0
    tr = FlowGRPOTrainer(load_config(FlowGRPOConfig, write(cfg_d, tmp_path / "c.yaml")), tmp_path / "run")
    tr.setup()
    seen = {}
    rollout_fn, balancer = tr.rollout_fn, tr.balancer

    def rollout(ctx, prompts, meta, sample_ids, group_ids):
        seen.update(step=ctx.step, prompts=prompts, meta=meta, sample_ids=sample_ids, group_ids=group_ids)
        return rollout_fn(ctx, prompts, meta, sample_ids, group_ids)

    def balance(scores, weights, gid, *rest):
        seen["gid"] = gid
        bal = balancer(scores, weights, gid, *rest)
        bal.metrics = {"balance/plugin": 1.5}
        return bal

    tr.rollout_fn, tr.balancer = rollout, balance
    m = tr.train_step(3)
    batch = tr.sampler.for_step(3, 2)
    assert seen["step"] == 3
    assert seen["prompts"] == [batch.prompts[0]] * 3 + [batch.prompts[1]] * 3
    assert seen["meta"] == [batch.metadata[0]] * 3 + [batch.metadata[1]] * 3
    assert seen["sample_ids"].tolist() == list(range(6))
    assert seen["group_ids"].tolist() == seen["gid"].tolist() == [0, 0, 0, 1, 1, 1]
    assert m["balance/plugin"] == 1.5 and not (tmp_path / "run" / "samples").exists()


def _step0_trainer(sd3_dir, tmp_path, **over):
    """A set-up trainer on the tiny SD3 model (4 sampling steps, `over` as tiny_config's overrides) and its first
    rollout: (trainer, rollout, group ids)."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.testing import first_rollout
    from imgalign.trainers.trainer import FlowGRPOTrainer

    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg_d = tiny_config(sd3_dir, tmp_path / "run", sampling__num_steps=4, **over)
    tr = FlowGRPOTrainer(load_config(FlowGRPOConfig, write(cfg_d, tmp_path / "c.yaml")), tmp_path / "run")
    tr.setup()
    return (tr, *first_rollout(tr))


def _step0_rollout(sd3_dir, tmp_path, **over):
    return _step0_trainer(sd3_dir, tmp_path, **over)[1:]


def _sde_kl(tr, ro, j: int, dv: torch.Tensor, block: int = 1) -> torch.Tensor:
    """Closed-form KL [B] between the sde kernel's steps from x_j whose velocities differ by dv:
    ‖dv·dt·(1 + ς²(1 − σ)/(2σ))‖² / (2ς²|dt|), the mean difference taken in block coordinates with noise_block."""
    from imgalign.trainers import kernels as K

    sig = [float(x) for x in ro.sigmas]
    s, dt = sig[j], sig[j + 1] - sig[j]
    a2 = float(K.sde_sigma_scale(s, sig[1], tr.cfg.sampling.noise_level)) ** 2
    dmu = K.block_coords(dv * dt * (1 + a2 * (1 - s) / (2 * s)), block)
    return (dmu.flatten(1) ** 2).sum(1) / (2 * a2 * abs(dt))


def test_noise_partners_pair_members_within_each_group_also_of_odd_size():
    """Antithetic pairs are (2k, 2k + 1) by position within the group: with groups of 3 the third member of a
    group has no partner, and the next group starts a new pair."""
    from imgalign.trainers.rollout import noise_partners

    ids, sign = noise_partners(torch.arange(6), 3, True)
    assert ids.tolist() == [0, 0, 2, 3, 3, 5] and sign.tolist() == [1.0, -1.0, 1.0, 1.0, -1.0, 1.0]
    ids, sign = noise_partners(torch.arange(6), 3, False)
    assert ids.tolist() == list(range(6)) and sign.tolist() == [1.0] * 6


@pytest.mark.parametrize("kernel", ["sde", "cps"])
def test_step_kernel_reduces_the_log_density_as_asked(kernel):
    """objective.logprob_reduce reaches the kernel: the mean-reduced log-density is the summed one over D."""
    from imgalign.trainers.rollout import step_kernel

    g = torch.Generator().manual_seed(0)
    x, v, y = (torch.randn(2, 3, 4, 4, generator=g) for _ in range(3))
    sig = torch.linspace(1, 0, 5)
    lp = {
        r: step_kernel(kernel, x, v, sig, 1, 0.7, prev_sample=y, reduce=r).log_prob for r in ("sum", "mean")
    }
    torch.testing.assert_close(lp["mean"], lp["sum"] / 48)


@pytest.mark.parametrize("kernel", ["sde", "cps"])
def test_step_kernel_steps_from_sigma_i_to_sigma_i_plus_1_at_the_noise_level(kernel):
    """step_kernel(kernel, ..., sigmas, i, a) is the kernel's step sigmas[i] -> sigmas[i + 1] (the SDE's sigma = 1
    guard at sigmas[1]): the std by hand, CPS sigma'·sin(aπ/2), SDE a·sqrt(sigma/(1 - sigma))·sqrt(-dt)."""
    import math

    from imgalign.trainers import kernels as K
    from imgalign.trainers.rollout import kernel_mean_std, step_kernel

    g = torch.Generator().manual_seed(0)
    x, v, eps = (torch.randn(2, 3, 4, 4, generator=g) for _ in range(3))
    sig = torch.tensor([1.0, 0.8, 0.5, 0.25, 0.0])
    out = step_kernel(kernel, x, v, sig, 1, 0.7, noise=eps)
    if kernel == "cps":
        ref = K.cps_step(x, v, 0.8, 0.5, 0.7, eps)
        std = 0.5 * math.sin(0.7 * math.pi / 2)
    else:
        ref = K.flow_sde_step(x, v, 0.8, 0.5, 0.7, 0.8, eps)
        std = 0.7 * math.sqrt(0.8 / 0.2) * math.sqrt(0.3)
    torch.testing.assert_close(out.prev_sample, ref.prev_sample)
    torch.testing.assert_close(out.prev_sample - out.mean, eps * std, rtol=1e-4, atol=1e-5)
    # the per-row mean and std tree rollouts sample and train with are the same step's
    mean, std_rows = kernel_mean_std(kernel, x, v, sig[1].expand(2), sig[2].expand(2), 0.7, sig[1])
    torch.testing.assert_close(mean, out.mean)
    torch.testing.assert_close(std_rows.flatten(), torch.full((2,), std))


def test_the_sde_window_and_the_shared_initial_noise_change_with_the_training_step():
    """Every training step draws its own SDE window (in the first half) and, with shared_init_noise, its own
    initial noise per group (shared by the group's members)."""
    from imgalign.trainers.config import SamplingConfig
    from imgalign.trainers.prompting import _mix
    from imgalign.trainers.rollout import RolloutContext, group_initial_noise, trained_steps

    cfg = SamplingConfig(num_steps=10, sde_window=2)
    windows = {tuple(trained_steps(cfg, 0, step)) for step in range(20)}
    assert len(windows) > 1 and all(len(w) == 2 and w[0] <= 4 for w in windows)

    class _Noise:
        def init_noise(self, gens):
            return torch.stack([torch.randn(3, generator=g) for g in gens])

    gid = torch.tensor([0, 0, 1, 1])
    a, b = (group_initial_noise(RolloutContext(_Noise(), None, cfg, 0, step), gid) for step in (0, 1))
    assert torch.equal(a[0], a[1]) and torch.equal(a[2], a[3]) and not torch.equal(a[0], a[2])
    assert not torch.equal(a[0], b[0])
    # apart from the per-sample streams: group g's start is not sample g's first draw (its SDE noise with a shared
    # start), which would correlate the first SDE noise of sample g with its start
    own = _Noise().init_noise([torch.Generator().manual_seed(_mix(0, 0, i)) for i in (0, 2)])
    assert not torch.equal(a[0], own[0]) and not torch.equal(a[2], own[1])


class _HalfDecayFlow:
    """A flow adapter stand-in: velocity v = -x/2, linear sigmas 1 -> 0, latents of `shape`, `nfe` per step."""

    def __init__(self, shape: tuple[int, ...], nfe: int) -> None:
        self.shape, self.nfe = shape, nfe

    def init_noise(self, gens):
        return torch.stack([torch.randn(*self.shape, generator=g) for g in gens])

    def sigmas(self, n):
        return torch.linspace(1.0, 0.0, n + 1)

    def velocity(self, x, sigma, cond, scale, transformer=None):
        return -0.5 * x

    def nfe_per_step(self, scale):
        return self.nfe


def test_sample_trajectories_keeps_the_float64_log_densities_and_counts_every_step():
    """The behaviour log-densities are stored as the kernel's float64 sums (not rounded through float32), 0 on the
    Euler steps; the NFE is rows x steps x the adapter's per-step cost. A fake adapter: v = -x/2, 3 steps."""
    from imgalign.trainers.config import SamplingConfig
    from imgalign.trainers.rollout import RolloutContext, sample_trajectories

    cfg = SamplingConfig(num_steps=3, group_size=2)
    traj, lps, nfe = sample_trajectories(
        RolloutContext(_HalfDecayFlow((4, 16, 16), 2), None, cfg, 0, 0),
        None,
        torch.arange(2),
        [0, 1],
        torch.tensor([0, 0]),
    )
    assert traj.shape == (2, 4, 4, 16, 16) and lps.dtype == torch.float64 and nfe == 2 * 3 * 2
    assert (lps[:, 2] == 0).all() and (lps[:, :2] != 0).all()
    assert not torch.equal(
        lps[:, :2], lps[:, :2].float().double()
    )  # float32 rounding would lose the sum's bits


def test_sample_trajectories_takes_euler_steps_from_sigma_i_to_sigma_i_plus_1_off_the_window():
    """Off the SDE window a transition is the Euler step x + v·(sigma_{i+1} - sigma_i): with v = -x/2 on the
    schedule 1, 2/3, 1/3, 0 and no trained step, each step multiplies x by 1 + 1/6 (toward 0 noise, not away)."""
    from imgalign.trainers.config import SamplingConfig
    from imgalign.trainers.rollout import RolloutContext, sample_trajectories

    cfg = SamplingConfig(num_steps=3, group_size=2)
    traj, lps, _ = sample_trajectories(
        RolloutContext(_HalfDecayFlow((1, 2, 2), 1), None, cfg, 0, 0),
        None,
        torch.arange(2),
        [],
        torch.tensor([0, 0]),
    )
    assert (lps == 0).all()
    for i in range(3):
        torch.testing.assert_close(traj[:, i + 1], traj[:, i] * (1 + 1 / 6))


def test_rollout_nfe_counts_cfg_twice(sd3_dir, tmp_path):
    """perf/nfe of a flat rollout: samples x steps x 2 with CFG (4 x 4 x 2), samples x steps without, summed over
    the forward batches. Each training step draws new noise for every sample."""
    from imgalign.trainers.testing import first_rollout

    for g, nfe in ((3.0, 32), (1.0, 16)):
        tr, ro, _ = _step0_trainer(sd3_dir, tmp_path / str(g), sampling__guidance_scale=g)
        assert ro.nfe == nfe
    with torch.no_grad():  # the scored images are the decoded final latents x0, not an earlier step's
        torch.testing.assert_close(ro.images, tr.adapter.decode(ro.x0).cpu())
        assert not torch.allclose(ro.images, tr.adapter.decode(ro.latents[:, -2]).cpu())
    assert _step0_rollout(sd3_dir, tmp_path / "b", sampling__batch_size=3)[0].nfe == 16
    ro1, _ = first_rollout(tr, 1)
    assert not torch.equal(ro1.latents[:, 0], ro.latents[:, 0])


def test_flat_rollouts_train_the_sde_window_of_their_own_training_step(sd3_dir, tmp_path):
    """A flat rollout samples (and stores log-densities at) the SDE window drawn for its training step: with a
    2-step window out of 4 the rollouts of steps 0..5 follow trained_steps(cfg, seed, step), not step 0's."""
    from imgalign.trainers.rollout import trained_steps
    from imgalign.trainers.testing import first_rollout

    tr, _, _ = _step0_trainer(sd3_dir, tmp_path, sampling__sde_window=2)
    s, seed = tr.cfg.sampling, tr.cfg.train.seed
    want = [trained_steps(s, seed, step) for step in range(6)]
    assert len({tuple(w) for w in want}) > 1
    for step, w in enumerate(want):
        ro, _ = first_rollout(tr, step)
        assert ro.train_steps == w
        assert ((ro.log_probs != 0).any(0)).nonzero().flatten().tolist() == w


def test_shared_init_noise_gives_each_group_one_start(sd3_dir, tmp_path):
    """sampling.shared_init_noise (DanceGRPO): a group's trajectories start from one noise and part by SDE noise;
    the result does not depend on the forward batch size. Without it, every sample has its own start."""
    ro, gid = _step0_rollout(sd3_dir, tmp_path, sampling__shared_init_noise=True)
    x_init, x0 = ro.latents[:, 0], ro.x0  # [4, ...]
    assert gid.tolist() == [0, 0, 1, 1]
    assert torch.equal(x_init[0], x_init[1]) and torch.equal(x_init[2], x_init[3])
    assert not torch.equal(x_init[0], x_init[2])
    assert not torch.allclose(x0[0], x0[1]) and not torch.allclose(x0[2], x0[3])  # the SDE noise differs
    assert torch.isfinite(ro.log_probs).all() and (ro.log_probs[:, :3] != 0).all()
    # with antithetic pairs too, the pair still shares its start: only the SDE noise is mirrored
    both, _ = _step0_rollout(
        sd3_dir, tmp_path / "c", sampling__shared_init_noise=True, sampling__antithetic=True
    )
    assert torch.equal(both.latents[0, 0], both.latents[1, 0]) and not torch.allclose(both.x0[0], both.x0[1])
    small, _ = _step0_rollout(
        sd3_dir, tmp_path / "b", sampling__shared_init_noise=True, sampling__batch_size=1
    )
    assert torch.allclose(small.latents, ro.latents, atol=1e-5)
    flat, _ = _step0_rollout(sd3_dir, tmp_path / "c")
    assert not torch.equal(flat.latents[0, 0], flat.latents[1, 0])


def test_antithetic_pairs_mirror_their_noise(sd3_dir, tmp_path, capsys):
    """sampling.antithetic: within a group, samples (0, 1) and (2, 3) draw mirrored noises. From one shared start,
    a pair's SDE step lands symmetrically about the step's mean, so both pairs have the same midpoint; mirrored
    noise has the same log-density. Without a shared start, the initial noises are mirrors too."""
    over = {"sampling__group_size": 4, "sampling__sde_window": 1, "sampling__sde_window_max_start": 0}
    ro, gid = _step0_rollout(
        sd3_dir, tmp_path / "a", sampling__shared_init_noise=True, sampling__antithetic=True, **over
    )
    assert gid.tolist() == [0, 0, 0, 0] and ro.train_steps == [0]
    x1, lp = ro.latents[:, 1], ro.log_probs[:, 0]  # after the trained step 0
    assert not torch.allclose(x1[0], x1[1]) and not torch.allclose(x1[0], x1[2])
    torch.testing.assert_close(x1[0] + x1[1], x1[2] + x1[3], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lp[0], lp[1])
    torch.testing.assert_close(lp[2], lp[3])
    ro2, _ = _step0_rollout(sd3_dir, tmp_path / "b", sampling__antithetic=True, **over)
    assert torch.equal(ro2.latents[1, 0], -ro2.latents[0, 0])
    assert torch.equal(ro2.latents[3, 0], -ro2.latents[2, 0])
    assert not torch.equal(ro2.latents[2, 0].abs(), ro2.latents[0, 0].abs())
    cfg = tiny_config(
        sd3_dir,
        tmp_path / "run",
        sampling__antithetic=True,
        sampling__group_size=3,
        sampling__samples_per_step=6,
    )
    assert main(["train", str(write(cfg, tmp_path / "c.yaml")), "--print-config"]) != 0
    assert "sampling.antithetic pairs the images of a group" in capsys.readouterr().err


def test_noise_block_puts_the_sde_noise_in_block_constant_latents(sd3_dir, tmp_path, capsys):
    """sampling.noise_block=2: the trained step's x' − μ is constant over 2x2 latent blocks, the stored log-density
    is the block-coordinate Gaussian's (the model re-evaluates it), and a run with KL trains with ratio 1 on its
    first update and finite metrics. Other kernels and tree rollouts are refused before any model loads."""
    from imgalign.config import load_config
    from imgalign.trainers import kernels as K
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.rollout import step_kernel
    from imgalign.trainers.testing import first_rollout
    from imgalign.trainers.trainer import FlowGRPOTrainer

    cfg_d = tiny_config(
        sd3_dir,
        tmp_path / "a",
        sampling__num_steps=4,
        sampling__noise_block=2,
        sampling__sde_window=1,
        sampling__sde_window_max_start=0,
    )
    tr = FlowGRPOTrainer(load_config(FlowGRPOConfig, write(cfg_d, tmp_path / "a.yaml")), tmp_path / "a")
    tr.setup()
    ro, _ = first_rollout(tr)
    assert ro.train_steps == [0]
    x0, x1 = ro.latents[:, 0], ro.latents[:, 1]
    with torch.no_grad():
        v = tr.adapter.velocity(x0, ro.sigmas[0], ro.cond, 1.0, transformer=tr.model)
        out = step_kernel("sde", x0, v, ro.sigmas, 0, 0.7, prev_sample=x1, block=2)
    r = x1 - out.mean
    assert float(r.abs().max()) > 0.01
    torch.testing.assert_close(K.block_project(r, 2), r, rtol=0, atol=1e-5)
    torch.testing.assert_close(out.log_prob, ro.log_probs[:, 0], rtol=0, atol=1e-3)

    out_dir = tmp_path / "run"
    cfg = tiny_config(sd3_dir, out_dir, sampling__noise_block=2, objective__kl_beta=0.1)
    assert main(["train", str(write(cfg, tmp_path / "b.yaml"))]) == 0
    m = rows(out_dir)
    assert len(m) == 2 and all(math.isfinite(row["policy/kl"]) for row in m)
    assert m[0]["policy/ratio_mean"] == pytest.approx(1.0, abs=1e-4)  # the first update is on-policy
    for over, name in [
        ({"sampling__kernel": "cps"}, "kernel='cps'"),
        ({"sampling__rollout": "tree"}, "'tree'"),
    ]:
        bad = tiny_config(sd3_dir, tmp_path / "bad", sampling__noise_block=2, **over)
        if "sampling__rollout" in over:
            bad["sampling"]["tree"] = {"branch_steps": [0], "branch_factors": [2]}
        assert main(["train", str(write(bad, tmp_path / "bad.yaml")), "--print-config"]) != 0
        err = capsys.readouterr().err
        assert "sampling.noise_block > 1 is implemented for the sde kernel with flat rollouts" in err
        assert name in err


def test_shared_init_noise_is_refused_for_tree_rollouts(sd3_dir, tmp_path, capsys):
    cfg = tiny_config(sd3_dir, tmp_path / "run", sampling__shared_init_noise=True, sampling__rollout="tree")
    cfg["sampling"]["tree"] = {"branch_steps": [0], "branch_factors": [2]}
    assert main(["train", str(write(cfg, tmp_path / "c.yaml")), "--print-config"]) != 0
    assert "sampling.shared_init_noise applies to flat rollouts" in capsys.readouterr().err


@pytest.mark.parametrize("over", [{"rewards__balancer": "marble"}, {"rewards__diagnose_cosines": True}])
def test_per_reward_advantages_are_refused_for_tree_rollouts(sd3_dir, tmp_path, capsys, over):
    """MARBLE and the gradient-cosine diagnostics need per-sample advantages that tree credit does not give: a config
    error before any model loads (it came after the first rollout)."""
    cfg = tiny_config(sd3_dir, tmp_path / "run", sampling__rollout="tree", **over)
    cfg["sampling"]["tree"] = {"branch_steps": [0], "branch_factors": [2]}
    assert main(["train", str(write(cfg, tmp_path / "c.yaml")), "--print-config"]) != 0
    assert "sampling.rollout=tree assigns its own per-edge credit" in capsys.readouterr().err


@pytest.mark.parametrize("kernel", ["sde", "cps"])
def test_velocity_step_weight_scales_each_steps_surrogate(sd3_dir, tmp_path, kernel):
    """objective.step_weight=velocity multiplies trained step i's surrogate by kernels.velocity_step_weights[i] of
    the sampling kernel; sampling.sde_window_max_start=0 puts the SDE window on the first steps."""
    from imgalign.config import load_config
    from imgalign.trainers import kernels as K
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.objectives import TrainContext
    from imgalign.trainers.testing import first_rollout
    from imgalign.trainers.trainer import FlowGRPOTrainer

    cfg_d = tiny_config(
        sd3_dir,
        tmp_path / "run",
        sampling__num_steps=4,
        sampling__sde_window=2,
        sampling__sde_window_max_start=0,
        sampling__kernel=kernel,
        objective__step_weight="velocity",
    )
    tr = FlowGRPOTrainer(load_config(FlowGRPOConfig, write(cfg_d, tmp_path / "c.yaml")), tmp_path / "run")
    tr.setup()
    ro, _ = first_rollout(tr)
    assert ro.train_steps == [0, 1]
    sig = [float(x) for x in ro.sigmas]
    w = K.velocity_step_weights(kernel, sig, [0, 1], tr.cfg.sampling.noise_level)
    other = K.velocity_step_weights(
        {"sde": "cps", "cps": "sde"}[kernel], sig, [0, 1], tr.cfg.sampling.noise_level
    )
    assert w[0] > 1 > w[1] and abs(w[0] - other[0]) > 1e-3
    idx, adv = torch.arange(4), torch.tensor([1.0, 0.5, 0.2, -0.1])
    valid = torch.ones(4, dtype=torch.bool)
    ctx = TrainContext(tr.adapter, tr.model, 0)
    for term in (0, 1):
        tr.cfg.objective.step_weight = "velocity"
        weighted = tr.objective.loss(ctx, ro, idx, term, adv, valid)[0].detach()
        tr.cfg.objective.step_weight = "uniform"
        plain = tr.objective.loss(ctx, ro, idx, term, adv, valid)[0].detach()
        assert float(plain) == pytest.approx(-0.4, rel=1e-4)  # on-policy: −mean(A)
        assert float(weighted) == pytest.approx(w[term] * float(plain), rel=1e-5)


def test_update_leaves_out_masked_samples_with_the_same_gradient(sd3_dir, tmp_path):
    """Samples with valid False (tied groups, non-finite rewards) contribute nothing to the GRPO loss, so the update
    leaves them out of its forwards: half the training NFEs here, the same parameter change (plain SGD, so the
    change is the gradient itself)."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.testing import first_rollout
    from imgalign.trainers.trainer import FlowGRPOTrainer

    cfg_d = tiny_config(sd3_dir, tmp_path / "run", sampling__samples_per_step=8, sampling__batch_size=8)
    cfg_d["train"].update(micro_batch_size=8, updates_per_step=1, grad_clip=0.0, warmup_steps=0)
    tr = FlowGRPOTrainer(load_config(FlowGRPOConfig, write(cfg_d, tmp_path / "c.yaml")), tmp_path / "run")
    tr.setup()
    ro, gid = first_rollout(tr)
    valid = gid % 2 == 0  # groups 0 and 2 trained, groups 1 and 3 tied
    adv = torch.where(valid, torch.tensor([1.0, -1.0] * 4), torch.zeros(8))
    start = [p.detach().clone() for p in tr.params]
    deltas, nfes = [], []
    for masks in (True, False):
        for p, p0 in zip(tr.params, start):
            p.data.copy_(p0)
        tr.optimizer = torch.optim.SGD(tr.params, lr=1.0)
        tr.scheduler = torch.optim.lr_scheduler.LambdaLR(tr.optimizer, lambda _: 1.0)
        tr.objective.masks_invalid = masks
        nfes.append(tr._update(0, ro, adv, valid)["perf/nfe_train"])
        deltas.append([p.detach() - p0 for p, p0 in zip(tr.params, start)])
    assert nfes[0] == nfes[1] / 2
    assert any(float(d.abs().max()) > 0 for d in deltas[0])
    for a, b in zip(*deltas):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def _sgd_trainer(sd3_dir, tmp_path, **train_over):
    """A set-up trainer on 8 samples (4 groups of 2) with plain SGD at lr 1 and no clipping, so an update's parameter
    change is minus the gradient itself."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import FlowGRPOTrainer

    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg_d = tiny_config(sd3_dir, tmp_path / "run", sampling__samples_per_step=8, sampling__batch_size=8)
    cfg_d["train"].update(grad_clip=0.0, warmup_steps=0, **train_over)
    tr = FlowGRPOTrainer(load_config(FlowGRPOConfig, write(cfg_d, tmp_path / "c.yaml")), tmp_path / "run")
    tr.setup()
    tr.optimizer = torch.optim.SGD(tr.params, lr=1.0)
    tr.scheduler = torch.optim.lr_scheduler.LambdaLR(tr.optimizer, lambda _: 1.0)
    return tr


def test_grad_clip_scales_the_update_to_its_norm_and_logs_the_norm_before_clipping(sd3_dir, tmp_path):
    """train.grad_clip c: the optimizer steps on the gradient scaled to norm c (SGD at lr 1: the parameter change is
    the unclipped one times c / norm); 0 means no clipping; train/grad_norm is the norm before clipping."""
    from imgalign.trainers.testing import first_rollout

    res = []
    for i, clip in enumerate((0.0, None)):
        tr = _sgd_trainer(sd3_dir, tmp_path / f"run{i}", micro_batch_size=8, updates_per_step=1)
        tr.cfg.train.grad_clip = clip if clip is not None else res[0][0] / 4
        ro, _ = first_rollout(tr)
        before = [p.detach().clone() for p in tr.params]
        m = tr._update(0, ro, torch.tensor([1.0, -1.0] * 4), torch.ones(8, dtype=torch.bool))
        res.append(
            (m["train/grad_norm"], torch.cat([(p.detach() - b).flatten() for p, b in zip(tr.params, before)]))
        )
    (norm, delta), (norm_clipped, delta_clipped) = res
    assert norm > 0 and float(delta.norm()) == pytest.approx(norm, rel=1e-4)
    assert norm_clipped == pytest.approx(norm, rel=1e-5)
    assert float(delta_clipped.norm()) == pytest.approx(norm / 4, rel=1e-4)
    torch.testing.assert_close(delta_clipped, delta / 4, rtol=1e-3, atol=1e-7)  # (float32 weight differences)


def test_update_weights_every_valid_sample_alike_whatever_the_micro_batches(sd3_dir, tmp_path):
    """The update's gradient is the mean over every valid sample: 8 micro-batches of 1 row (2 of them invalid) give
    the same parameter change as one micro-batch of 8 (a mean of per-micro-batch means gave 0.25 relative error)."""
    from imgalign.trainers.testing import first_rollout

    deltas = []
    for mb in (8, 1):
        tr = _sgd_trainer(sd3_dir, tmp_path / f"mb{mb}", micro_batch_size=mb, updates_per_step=1)
        tr.objective.masks_invalid = False  # keep the invalid rows in the micro-batches (zero weight)
        ro, gid = first_rollout(tr)
        valid = gid != 1
        adv = torch.where(valid, torch.tensor([1.0, -1.0] * 4), torch.zeros(8))
        start = [p.detach().clone() for p in tr.params]
        tr._update(0, ro, adv, valid)
        deltas.append(torch.cat([(p.detach() - p0).flatten() for p, p0 in zip(tr.params, start)]))
    assert float(deltas[0].norm()) > 0
    assert float((deltas[1] - deltas[0]).norm() / deltas[0].norm()) < 1e-5


def test_update_runs_updates_per_step_optimizer_steps_when_rows_do_not_divide(sd3_dir, tmp_path):
    """6 valid rows and train.updates_per_step 4: four optimizer updates (LR schedule, EMA count them)."""
    from imgalign.trainers.testing import first_rollout

    tr = _sgd_trainer(sd3_dir, tmp_path, micro_batch_size=1, updates_per_step=4)
    ro, gid = first_rollout(tr)
    valid = gid < 3
    adv = torch.where(valid, torch.tensor([1.0, -1.0] * 4), torch.zeros(8))
    before = tr.scheduler.last_epoch
    tr._update(0, ro, adv, valid)
    assert tr.scheduler.last_epoch - before == 4


def test_a_resume_compares_with_the_runs_config_when_the_checkpoint_has_none_and_keeps_the_first_copy(
    tmp_path, caplog
):
    """A checkpoint written before checkpoints held their config.yaml: the changes are named against the run's
    config.yaml; a saved config that does not parse is reported as changed. (The load stops at the missing weights,
    after these; that config.until-step-N.yaml is never overwritten is tests/test_resume_s61.py's.)"""
    import logging
    from types import SimpleNamespace

    from imgalign.config import load_config, to_dict
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import FlowGRPOTrainer

    out = tmp_path / "run"
    ckpt = out / "checkpoints" / "step-000002"
    (ckpt / "trainer_state").mkdir(parents=True)
    (ckpt / "trainer_state" / "state.json").write_text(json.dumps({"step": 2, "config_hash": "old"}))
    old = to_dict(load_config(FlowGRPOConfig, None, ["train.lr=0.5"]))
    (out / "config.yaml").write_text(yaml.safe_dump(old))
    tr = SimpleNamespace(cfg=load_config(FlowGRPOConfig, None, ["train.lr=0.25"]), out=out, is_main=True)
    with caplog.at_level(logging.WARNING), pytest.raises(Exception, match="trainable.safetensors"):
        FlowGRPOTrainer._load(tr, ckpt)
    assert "train.lr: 0.5 -> 0.25" in caplog.text
    # a saved config it cannot read is still reported as a change (no setting is known to be the same)
    (ckpt / "trainer_state" / "config.yaml").write_text("model: [unclosed\n")
    caplog.clear()
    with caplog.at_level(logging.WARNING), pytest.raises(Exception, match="trainable.safetensors"):
        FlowGRPOTrainer._load(tr, ckpt)
    assert "with a changed config (see its config.yaml)" in caplog.text
    # moved out of its run (no checkpoints/ parent): the config two folders up is another run's, not compared
    moved = tmp_path / "elsewhere" / "old" / "step-000002"
    shutil.copytree(ckpt, moved)
    (moved / "trainer_state" / "config.yaml").unlink()
    (tmp_path / "elsewhere" / "config.yaml").write_text(yaml.safe_dump(old))
    caplog.clear()
    with caplog.at_level(logging.WARNING), pytest.raises(Exception, match="trainable.safetensors"):
        FlowGRPOTrainer._load(tr, moved)
    assert "with a changed config (it holds no config.yaml to compare with)" in caplog.text
    assert "train.lr" not in caplog.text


def test_update_rows_keep_at_least_one_row_per_optimizer_update():
    """With a masking objective the update trains on the valid rows first, then padding, but on at least
    train.updates_per_step rows, so no update is an empty chunk: 1 valid row of 4 and 3 updates give 3 rows."""
    from types import SimpleNamespace

    from imgalign.trainers.trainer import FlowGRPOTrainer

    tr = SimpleNamespace(
        objective=SimpleNamespace(masks_invalid=True),
        acc=SimpleNamespace(device="cpu"),
        world=1,
        cfg=SimpleNamespace(train=SimpleNamespace(updates_per_step=3)),
    )
    perm = torch.tensor([3, 1, 0, 2])
    valid = torch.tensor([False, False, True, False])
    assert FlowGRPOTrainer._update_rows(tr, perm, valid).tolist() == [2, 3, 1]
    tr.cfg.train.updates_per_step = 1
    assert FlowGRPOTrainer._update_rows(tr, perm, valid).tolist() == [2]


def test_stateful_rewards_are_not_updated_when_every_sample_diverged():
    """A step whose samples all diverged leaves a stateful reward (fid's set, the discriminator) as it was: no
    update with an empty batch."""
    from types import SimpleNamespace

    from imgalign.trainers.trainer import FlowGRPOTrainer

    calls = []
    reward = SimpleNamespace(stateful=True, update=lambda *a: calls.append(a))
    tr = SimpleNamespace(rewards={"r": reward}, acc=SimpleNamespace(device="cpu", gather=lambda t: t))
    ro = SimpleNamespace(images=torch.zeros(2, 3, 4, 4))
    m: dict = {}
    FlowGRPOTrainer._update_stateful_rewards(tr, ro, ["a", "b"], [{}, {}], m, torch.tensor([True, True]))
    assert calls == [] and m == {}
    FlowGRPOTrainer._update_stateful_rewards(tr, ro, ["a", "b"], [{}, {}], m, torch.tensor([True, False]))
    assert len(calls) == 1 and calls[0][0].shape[0] == 1 and calls[0][1] == ["b"]


def test_ema_averages_the_weights_after_each_optimizer_update_with_its_decay(sd3_dir, tmp_path):
    """train.ema_decay d: the EMA starts at the initial weights and after every optimizer update becomes
    d·ema + (1 − d)·weights (no warm-up), so after updates w_1..w_n it is d^n·w_0 + Σ_j (1 − d)·d^(n−j)·w_j: here
    4 updates at d = 0.75 (not 0.5, where d and 1 - d swapped agree), hand-computed from the weights recorded after
    each update."""
    from imgalign.trainers.testing import first_rollout

    d = 0.75
    tr = _sgd_trainer(sd3_dir, tmp_path, ema_decay=d, micro_batch_size=2, updates_per_step=4)
    assert tr.ema is not None
    tr.optimizer.param_groups[0]["lr"] = 0.01
    tr.scheduler = torch.optim.lr_scheduler.LambdaLR(tr.optimizer, lambda _: 1.0)
    w0 = [p.detach().float().clone() for p in tr.params]
    seen: list[list[torch.Tensor]] = []
    tr.optimizer.register_step_post_hook(
        lambda *_: seen.append([p.detach().float().clone() for p in tr.params])
    )
    ro, _ = first_rollout(tr)
    tr._update(0, ro, torch.tensor([1.0, -1.0] * 4), torch.ones(8, dtype=torch.bool))
    assert len(seen) == 4
    expect = w0
    for w in seen:
        expect = [d * e + (1 - d) * x for e, x in zip(expect, w)]
    for e, s in zip(expect, tr.ema.shadow, strict=True):
        torch.testing.assert_close(s, e, rtol=1e-5, atol=1e-7)
    # the EMA lags the live weights (a decay ignored would copy them)
    lag = max(float((s - p.detach().float()).abs().max()) for s, p in zip(tr.ema.shadow, tr.params))
    assert lag > 1e-4


def test_update_metrics_are_means_over_valid_samples_whatever_the_padding(sd3_dir, tmp_path):
    """2 valid rows among 8 micro-batches of 1 (the invalid rows kept, as a process pads its update to the others'
    row count): the padding micro-batches' empty metrics (0 for a mean, 1 for a ratio) are not averaged in, so the
    update's metrics equal those of one micro-batch of the 2 valid rows (lr 0: every micro-batch sees the same
    policy); ratio_max / ratio_min are the extremes."""
    from imgalign.trainers.testing import first_rollout

    out = []
    for mb in (1, 2):
        tr = _sgd_trainer(sd3_dir, tmp_path / f"mb{mb}", micro_batch_size=mb, updates_per_step=1)
        tr.objective.masks_invalid = mb == 2  # micro-batches of 1: every row kept, 6 of 8 of them padding
        tr.optimizer = torch.optim.SGD(tr.params, lr=0.0)
        tr.scheduler = torch.optim.lr_scheduler.LambdaLR(tr.optimizer, lambda _: 1.0)
        ro, gid = first_rollout(tr)
        valid = gid == 0
        adv = torch.where(valid, torch.tensor([1.0, -1.0] * 4), torch.zeros(8))
        out.append(tr._update(0, ro, adv, valid))
    padded, plain = out
    assert padded["policy/logprob"] == pytest.approx(plain["policy/logprob"], rel=1e-5)
    assert padded["policy/ratio_max"] == pytest.approx(1.0, abs=1e-4) and plain[
        "policy/ratio_min"
    ] == pytest.approx(1.0, abs=1e-4)


def test_update_metrics_keep_the_max_and_min_over_micro_batches_and_average_the_rest(sd3_dir, tmp_path):
    """An objective's ..._max / ..._min metrics are the extremes over the update's micro-batches, other metrics
    their mean weighted by valid samples; micro-batches without a valid sample report nothing (not even a NaN)."""
    from types import SimpleNamespace

    from imgalign.trainers.testing import first_rollout

    tr = _sgd_trainer(sd3_dir, tmp_path, micro_batch_size=1, updates_per_step=1)
    ro, _ = first_rollout(tr)

    def loss(ctx, ro, mb, term, adv, valid):
        row = float(mb[0])
        mm = {"x": row, "x_max": row, "x_min": row}
        # a mean over no valid sample is 0/0: a micro-batch without one adds nothing, NaN included
        if row == 0:
            mm["x"] = math.nan
        if row == 7:  # a metric only a micro-batch without a valid sample reports: reported as nothing (NaN)
            mm.update(y=row, y_max=row, y_min=row)
        return sum(p.sum() for p in tr.params) * 0.0, mm

    tr.objective = SimpleNamespace(terms=lambda ro: [0], loss=loss, masks_invalid=False)
    valid = torch.tensor([False, False, True, True, True, True, False, False])
    m = tr._update(0, ro, torch.zeros(8), valid)
    assert (m["x"], m["x_max"], m["x_min"]) == (3.5, 5.0, 2.0)
    assert math.isnan(m["y"]) and math.isnan(m["y_max"]) and math.isnan(m["y_min"])  # not -inf / +inf


def _edit_rollouts(tr, edit) -> None:
    """Wrap the trainer's rollout so that `edit(ro)` changes each rollout in place before the trainer sees it (a
    diverged sample, a NaN log-density)."""
    inner = tr.rollout_fn

    def edited(ctx, prompts, meta, ids, gids):
        ro = inner(ctx, prompts, meta, ids, gids)
        edit(ro)
        return ro

    tr.rollout_fn = edited


def test_a_diverged_sample_is_masked_and_never_reaches_the_weights(sd3_dir, tmp_path, caplog):
    """A rollout sample with NaN latents and image (a diverged policy) is warned about and masked like a NaN reward;
    it is padded into the update here (2 valid rows < 4 updates), and the weights stay finite."""
    tr = _sgd_trainer(sd3_dir, tmp_path, micro_batch_size=1, updates_per_step=4)

    def diverging(ro):
        ro.latents[2:8] = float("nan")
        ro.images[2:8] = float("nan")

    _edit_rollouts(tr, diverging)
    with caplog.at_level("WARNING"):
        m = tr.train_step(0)
    assert "6 sample(s) of the rollout are not finite" in caplog.text
    assert m["reward/red_reward/nonfinite"] == 6
    assert m["train/skipped_updates"] == 0 and math.isfinite(m["train/grad_norm"])
    assert all(torch.isfinite(p).all() for p in tr.params)


def test_a_sample_with_only_non_finite_log_densities_is_masked_too(sd3_dir, tmp_path, caplog):
    """Finite latents and image but a NaN rollout log-density (the ratio's denominator): masked and zeroed like a
    diverged sample, so the update stays finite."""
    tr = _sgd_trainer(sd3_dir, tmp_path, micro_batch_size=1, updates_per_step=4)
    _edit_rollouts(tr, lambda ro: ro.log_probs[5].fill_(float("nan")))
    with caplog.at_level("WARNING"):
        m = tr.train_step(0)
    assert "1 sample(s) of the rollout are not finite" in caplog.text
    # sample 5 and its group mate 4 (one finite reward left)
    assert m["train/valid_ratio"] == pytest.approx(6 / 8)
    assert m["train/skipped_updates"] == 0 and all(torch.isfinite(p).all() for p in tr.params)


def test_mask_diverged_zeroes_every_tensor_of_a_diverged_sample_in_place(caplog):
    """A sample with a non-finite image, trajectory or log-density is flagged, and its image, latents and
    log-densities are zeroed in place (a padded row's loss term must be an exact 0: NaN·0 is NaN); the others are
    untouched. A tree rollout (latents per parent row, not per sample) is judged and zeroed by its images only."""
    from types import SimpleNamespace

    from imgalign.trainers.trainer import FlowGRPOTrainer

    def rollout(b: int, rows: int) -> SimpleNamespace:
        return SimpleNamespace(
            prompts=[f"p{i}" for i in range(b)],
            images=torch.rand(b, 3, 2, 2),
            latents=torch.randn(rows, 3, 4),
            log_probs=torch.randn(rows, 2),
        )

    ro = rollout(4, 4)
    ro.images[0, 1, 0, 0] = float("nan")
    ro.latents[1, 2, 3] = float("inf")
    ro.log_probs[2, 0] = float("nan")
    before = (ro.images[3].clone(), ro.latents[3].clone(), ro.log_probs[3].clone())
    with caplog.at_level("WARNING"):
        bad = FlowGRPOTrainer._mask_diverged(None, ro, 7)
    assert bad.tolist() == [True, True, True, False]
    assert (
        "step 8: 3 sample(s) of the rollout are not finite" in caplog.text  # 0-based step 7: metrics row 8
        and "['p0', 'p1', 'p2']" in caplog.text
    )
    for t in (ro.images, ro.latents, ro.log_probs):
        assert torch.equal(t[:3], torch.zeros_like(t[:3]))
    assert all(torch.equal(x, y) for x, y in zip((ro.images[3], ro.latents[3], ro.log_probs[3]), before))
    tree = rollout(4, 2)  # 2 parent rows for 4 samples
    tree.latents[0] = float("nan")
    tree.images[3] = float("nan")
    assert FlowGRPOTrainer._mask_diverged(None, tree, 0).tolist() == [False, False, False, True]
    assert torch.isnan(tree.latents[0]).all() and not tree.images.isnan().any()


def test_a_non_finite_gradient_skips_the_optimizer_update(sd3_dir, tmp_path, caplog):
    """Whatever makes the gradient NaN, the update is skipped with a warning: never NaN weights."""
    from imgalign.trainers.testing import first_rollout

    tr = _sgd_trainer(sd3_dir, tmp_path, micro_batch_size=8, updates_per_step=1)
    ro, gid = first_rollout(tr)
    adv = torch.tensor([float("nan"), 1.0] * 4)  # a NaN advantage on valid rows poisons the loss itself
    start = [p.detach().clone() for p in tr.params]
    with caplog.at_level("WARNING"):
        m = tr._update(0, ro, adv, torch.ones(8, dtype=torch.bool))
    # the run's first step (0-based 0) is named as its metrics.jsonl row and samples are: step 1
    assert "step 1: the gradient is not finite" in caplog.text and m["train/skipped_updates"] == 1
    assert all(torch.equal(p, p0) for p, p0 in zip(tr.params, start))


def test_an_infinite_gradient_norm_skips_the_optimizer_update_too(sd3_dir, tmp_path, monkeypatch):
    from imgalign.trainers.testing import first_rollout

    tr = _sgd_trainer(sd3_dir, tmp_path, micro_batch_size=8, updates_per_step=1)
    ro, gid = first_rollout(tr)
    monkeypatch.setattr(tr.acc, "clip_grad_norm_", lambda params, max_norm: torch.tensor(float("inf")))
    start = [p.detach().clone() for p in tr.params]
    m = tr._update(0, ro, torch.tensor([-1.0, 1.0] * 4), torch.ones(8, dtype=torch.bool))
    assert m["train/skipped_updates"] == 1 and math.isnan(m["train/grad_norm"])
    assert all(torch.equal(p, p0) for p, p0 in zip(tr.params, start))


def test_an_update_without_a_valid_sample_is_skipped(sd3_dir, tmp_path):
    """Every group tied: no sample carries signal, so no optimizer update is made (AdamW's weight decay and momentum
    moved every weight on a zero gradient), the LR schedule does not advance, and the metrics count the updates."""
    from imgalign.trainers.testing import first_rollout

    tr = _sgd_trainer(sd3_dir, tmp_path, micro_batch_size=2, updates_per_step=2)
    tr.optimizer = torch.optim.AdamW(tr.params, lr=1e-2, weight_decay=0.1)
    tr.scheduler = torch.optim.lr_scheduler.LambdaLR(tr.optimizer, lambda _: 1.0)
    ro, _ = first_rollout(tr)
    start = [p.detach().clone() for p in tr.params]
    m = tr._update(0, ro, torch.zeros(8), torch.zeros(8, dtype=torch.bool))
    assert m["train/empty_updates"] == 2 and m["train/skipped_updates"] == 0
    assert tr.scheduler.last_epoch == 0
    assert all(torch.equal(p, p0) for p, p0 in zip(tr.params, start))


def test_diverged_samples_stay_out_of_stateful_rewards(sd3_dir, tmp_path):
    """A diverged sample's image is zeroed for the rewards; a stateful reward (fid's generated set, the online
    discriminator) is updated without it, not with a black image."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import FlowGRPOTrainer

    cfg_d = tiny_config(sd3_dir, tmp_path / "run", sampling__samples_per_step=8, sampling__batch_size=8)
    cfg_d["rewards"]["names"] = ["imgalign.trainers.testing:RunningMeanReward"]
    tr = FlowGRPOTrainer(load_config(FlowGRPOConfig, write(cfg_d, tmp_path / "c.yaml")), tmp_path / "run")
    tr.setup()
    seen = {}

    def diverging(ro):
        ro.images[1] = float("nan")
        seen["mean"] = float(ro.images[[0, *range(2, 8)]].mean(dim=(1, 2, 3)).sum())
        seen["prompts"] = [p for i, p in enumerate(ro.prompts) if i != 1]
        seen["meta"] = [md for i, md in enumerate(ro.metadata) if i != 1]

    _edit_rollouts(tr, diverging)
    r = tr.rewards["running_mean"]
    inner = r.update

    def update(images, prompts, metadata=None):
        seen["updated"] = (list(prompts), list(metadata))
        return inner(images, prompts, metadata)

    r.update = update
    m = tr.train_step(0)
    assert m["reward/running_mean/count"] == 7 and r.count == 7
    assert r.total == pytest.approx(seen["mean"], rel=1e-5)
    # the 7 kept images' prompts and metadata, in order (the diverged sample's group mate keeps its prompt)
    assert seen["updated"] == (seen["prompts"], seen["meta"]) and len(set(seen["prompts"])) == 4


def test_a_diverged_sample_is_masked_even_when_a_reward_scores_it_finite(sd3_dir, tmp_path):
    """A reward may give a finite score to a NaN image (a detector that finds nothing scores 0, a prompt-only reward
    never looks): the trainer masks a diverged sample's scores itself. Sample 3 diverges under a reward that scores
    every sample finite (0..7): it counts as non-finite and its group (2, 3) is left without a pair. The reward is
    shown that image as NaN (a set-based reward would take a black one in as a sample)."""
    from imgalign.rewards.base import RewardOutput

    tr = _sgd_trainer(sd3_dir, tmp_path, micro_batch_size=8, updates_per_step=1)
    _edit_rollouts(tr, lambda ro: ro.images[3].fill_(float("nan")))
    shown = []

    def scores_everything(images, prompts, metadata):
        shown.append(images.clone())
        return RewardOutput(torch.arange(len(prompts), dtype=torch.float32))

    tr.rewards["red_reward"] = scores_everything
    m = tr.train_step(0)
    # the reward is shown the diverged image as NaN, not as the zeroed (black) image the sample grid shows
    assert shown[0][3].isnan().all() and shown[0][[0, 1, 2, 4, 5, 6, 7]].isfinite().all()
    assert m["reward/red_reward/nonfinite"] == 1
    assert m["reward/red_reward/mean"] == pytest.approx((28 - 3) / 7)
    assert m["train/valid_ratio"] == pytest.approx(6 / 8)


def test_a_diverged_sample_is_black_in_the_sample_grid(sd3_dir, tmp_path):
    """A diverged sample's image is zeroed: the step's sample grid shows it black (an +inf image clamped unzeroed
    would show white), the other samples as generated."""
    import numpy as np
    from PIL import Image

    tr = _sgd_trainer(sd3_dir, tmp_path, micro_batch_size=8, updates_per_step=1)
    _edit_rollouts(tr, lambda ro: ro.images[2].fill_(float("inf")))
    tr.train_step(0)
    grid = np.asarray(Image.open(tr.out / "samples" / "step-000001.png"))
    w = grid.shape[1] // 8  # one row of the 8 samples
    assert (grid[:, 2 * w : 3 * w] == 0).all()
    assert all(grid[:, i * w : (i + 1) * w].any() for i in (0, 1, 3, 4, 5, 6, 7))


def test_update_gradient_is_the_mean_over_the_trained_steps_not_their_sum(sd3_dir, tmp_path):
    """With T trained steps (loss terms) per sample, the update's gradient is the mean of the T per-step gradients:
    at SGD lr 1 from the same weights, the parameter change of the update over every term is the mean of the changes
    of T updates each on one term (a sum would be T times it, and train/grad_norm and clipping with it); the logged
    train/grad_norm is its norm."""
    from imgalign.trainers.testing import first_rollout

    tr = _sgd_trainer(sd3_dir, tmp_path, micro_batch_size=8, updates_per_step=1)
    ro, _ = first_rollout(tr)
    terms = tr.objective.terms(ro)
    assert len(terms) >= 2
    adv, valid = torch.tensor([1.0, -1.0] * 4), torch.ones(8, dtype=torch.bool)
    start = [p.detach().clone() for p in tr.params]

    def change() -> torch.Tensor:
        d = torch.cat([(p.detach() - p0).flatten() for p, p0 in zip(tr.params, start)])
        with torch.no_grad():
            for p, p0 in zip(tr.params, start):
                p.copy_(p0)
        return d

    one = []
    for t in terms:
        tr.objective.terms = lambda _ro, t=t: [t]
        tr._update(0, ro, adv, valid)
        one.append(change())
    del tr.objective.terms  # the objective's own method again: every term
    m = tr._update(0, ro, adv, valid)
    full = change()
    mean = torch.stack(one).mean(0)
    assert float(mean.norm()) > 0
    assert float((full - mean).norm() / mean.norm()) < 1e-4
    assert m["train/grad_norm"] == pytest.approx(float(full.norm()), rel=1e-4)


def test_grad_norm_is_the_mean_over_the_optimizer_updates(sd3_dir, tmp_path):
    """train/grad_norm of a step with 2 optimizer updates is the mean of their two gradient norms (SGD at lr 1 and
    no clipping: each update's parameter change is minus its gradient), not the last or the largest."""
    from imgalign.trainers.testing import first_rollout

    tr = _sgd_trainer(sd3_dir, tmp_path, micro_batch_size=4, updates_per_step=2)
    weights = [[p.detach().clone() for p in tr.params]]
    tr.optimizer.register_step_post_hook(lambda *_: weights.append([p.detach().clone() for p in tr.params]))
    ro, _ = first_rollout(tr)
    m = tr._update(0, ro, torch.tensor([1.0, -1.0] * 4), torch.ones(8, dtype=torch.bool))
    assert len(weights) == 3
    norms = [
        float(torch.cat([(b - a).flatten() for a, b in zip(w0, w1)]).norm())
        for w0, w1 in zip(weights, weights[1:])
    ]
    assert abs(norms[0] - norms[1]) > 0.01 * max(norms)  # a max (or the last) would differ from the mean
    assert m["train/grad_norm"] == pytest.approx(sum(norms) / 2, rel=1e-4)


@pytest.mark.parametrize(
    ("over", "msg"),
    [
        ({"sampling__sde_window_max_start": -2}, "sampling.sde_window_max_start must be -1"),
        ({"sampling__sde_window": 1, "sampling__sde_window_max_start": 2}, "starts at step 1 at the latest"),
        ({"objective__step_weight": "velocity", "objective__name": "nft"}, "objective.step_weight=velocity"),
        ({"objective__anchor_beta": 0.1}, "objective.anchor_beta anchors the untrained"),
        ({"objective__anchor_beta": -1.0}, "objective.anchor_beta must be >= 0 and finite (got -1.0)"),
        ({"objective__kl_beta": 0.04, "objective__name": "nft"}, "objective.kl_beta is the closed-form KL"),
    ],
)
def test_step_weight_and_window_start_bad_values(sd3_dir, tmp_path, capsys, over, msg):
    cfg = tiny_config(sd3_dir, tmp_path / "run", **over)
    assert main(["train", str(write(cfg, tmp_path / "c.yaml")), "--print-config"]) != 0
    assert msg in capsys.readouterr().err


def test_plugin_objective_hooks_and_state(sd3_dir, tmp_path):
    """An objective given as package.module:attr plugs in through config; its hooks run and its state is saved."""
    out = tmp_path / "run"
    cfg = tiny_config(sd3_dir, out, objective__name="imgalign.trainers.testing:counting_grpo")
    cfg["train"]["updates_per_step"] = 2
    cfg["log"]["checkpoint_every"] = 1
    assert main(["train", str(write(cfg, tmp_path / "c.yaml"))]) == 0
    state = torch.load(
        out / "checkpoints" / "step-000002" / "trainer_state" / "objective.pt", weights_only=True
    )
    assert state == {"updates": 4}


PLUGIN_OBJECTIVES = """
import torch

from imgalign.trainers.objectives import GRPOObjective


class Minimal:  # the documented contract only: terms and loss, no needs_reference
    def __init__(self, cfg, sampling):
        self.inner = GRPOObjective(cfg, sampling)

    def terms(self, rollout):
        return self.inner.terms(rollout)

    def loss(self, ctx, rollout, idx, term, advantages, valid):
        return self.inner.loss(ctx, rollout, idx, term, advantages, valid)


class OneArg:
    def __init__(self, cfg):
        pass


def loss_function(rollout, advantages):
    return 0.0


class NoLoss:
    def __init__(self, cfg, sampling):
        pass

    def terms(self, rollout):
        return [0]


instance = None


class PerSample(Minimal):  # forgot the mean: a loss per sample
    def loss(self, ctx, rollout, idx, term, advantages, valid):
        loss, m = super().loss(ctx, rollout, idx, term, advantages, valid)
        return loss * torch.ones(len(idx)), m


class LossOnly(Minimal):
    def loss(self, ctx, rollout, idx, term, advantages, valid):
        return super().loss(ctx, rollout, idx, term, advantages, valid)[0]


class Detached(Minimal):
    def loss(self, ctx, rollout, idx, term, advantages, valid):
        loss, m = super().loss(ctx, rollout, idx, term, advantages, valid)
        return loss.detach(), m


class VectorMetric(Minimal):
    def loss(self, ctx, rollout, idx, term, advantages, valid):
        loss, m = super().loss(ctx, rollout, idx, term, advantages, valid)
        return loss, {**m, "my/per_sample": torch.ones(len(idx))}
"""


def test_a_plugin_objective_off_the_contract_fails_before_the_model_loads(
    sd3_dir, tmp_path, capsys, monkeypatch
):
    """An objective given as package.module:attr that cannot be built as Objective(cfg, sampling) or lacks terms /
    loss is one error naming it and the contract before any model loads (was: a TypeError traceback, or an
    AttributeError on needs_reference after the model had loaded)."""
    _user_module(tmp_path, monkeypatch, "cfgtest_objectives", PLUGIN_OBJECTIVES)
    _no_model_load(monkeypatch)
    for attr, msg in [
        (
            "OneArg",
            "cannot be built as cfgtest_objectives:OneArg(cfg, sampling): too many positional arguments",
        ),
        ("loss_function", "built a float without the method(s) terms, loss"),  # a loss function, not a class
        ("NoLoss", "built a NoLoss without the method(s) loss: an objective is a class built as"),
        ("instance", "'cfgtest_objectives:instance' is of type NoneType, not a class"),
    ]:
        cfg = tiny_config(sd3_dir, tmp_path / "run", objective__name=f"cfgtest_objectives:{attr}")
        err = _refused(cfg, tmp_path, capsys)
        assert f"objective 'cfgtest_objectives:{attr}'" in err and msg in err, err


def test_a_plugin_objectives_loss_off_the_contract_is_refused_by_name(sd3_dir, tmp_path, capsys, monkeypatch):
    """loss(...) must return (a scalar tensor with a graph, a dict of numbers): a per-sample loss, a bare loss, a
    detached loss or a tensor metric is one error naming the objective (was: a traceback from backward())."""
    _user_module(tmp_path, monkeypatch, "cfgtest_objectives", PLUGIN_OBJECTIVES)
    for attr, msg in [
        ("PerSample", "returned the loss as a tensor of shape (2,); it must be a scalar tensor"),
        ("LossOnly", "returned a Tensor; it must return (loss, metrics)"),
        ("Detached", "returned a loss without a graph (requires_grad is False)"),
        ("VectorMetric", "returned metric 'my/per_sample' as a Tensor; metrics must be numbers"),
    ]:
        cfg = tiny_config(
            sd3_dir, tmp_path / attr, objective__name=f"cfgtest_objectives:{attr}", train__max_steps=1
        )
        err = _refused(cfg, tmp_path, capsys)
        assert f"objective 'cfgtest_objectives:{attr}': loss(...)" in err and msg in err, err


def test_a_plugin_objective_with_only_terms_and_loss_trains_a_full_fine_tune(sd3_dir, tmp_path, monkeypatch):
    """needs_reference is optional (the contract names terms and loss only): a full fine-tune read it unguarded."""
    _user_module(tmp_path, monkeypatch, "cfgtest_objectives", PLUGIN_OBJECTIVES)
    cfg = tiny_config(
        sd3_dir, tmp_path / "run", objective__name="cfgtest_objectives:Minimal", train__max_steps=1
    )
    assert main(["train", str(write(cfg, tmp_path / "c.yaml"))]) == 0
    assert [r["step"] for r in rows(tmp_path / "run")] == [1]


PLUGIN_BALANCERS = """
from imgalign.trainers.rewarding import Balanced, group_norm_weighted


def one_short(rewards, weights, group_ids, finite, std_mode, adv_clip):
    b = group_norm_weighted(rewards, weights, group_ids, finite, std_mode, adv_clip)
    return Balanced(b.advantages[:-1], b.valid[:-1], b.zero_std_ratio)


def bare_advantages(rewards, weights, group_ids, finite, std_mode, adv_clip):
    return group_norm_weighted(rewards, weights, group_ids, finite, std_mode, adv_clip).advantages


def float_valid(rewards, weights, group_ids, finite, std_mode, adv_clip):
    b = group_norm_weighted(rewards, weights, group_ids, finite, std_mode, adv_clip)
    return Balanced(b.advantages, b.valid.float(), b.zero_std_ratio)


def two_args(rewards, weights):
    return None
"""


def test_a_plugin_balancer_off_the_contract_is_refused_by_name(sd3_dir, tmp_path, capsys, monkeypatch):
    """A balancer given as package.module:attr that cannot take a balancer's six arguments is refused before the
    model loads; one returning advantages / valid of the wrong length or type, or no Balanced, is refused by name at
    the first step (was: an IndexError or AttributeError traceback inside the update)."""
    _user_module(tmp_path, monkeypatch, "cfgtest_balancers", PLUGIN_BALANCERS)
    for attr, msg in [
        ("two_args", "cannot be called as one: too many positional arguments; a balancer is a function"),
        ("one_short", "returned advantages as torch.float32 (3,); it must be a float tensor of shape (4,)"),
        ("bare_advantages", "returned a Tensor, not a Balanced"),
        ("float_valid", "returned valid as torch.float32 (4,); it must be a bool tensor of shape (4,)"),
    ]:
        cfg = tiny_config(sd3_dir, tmp_path / attr, train__max_steps=1)
        cfg["rewards"]["balancer"] = f"cfgtest_balancers:{attr}"
        err = _refused(cfg, tmp_path, capsys)
        assert f"reward balancer 'cfgtest_balancers:{attr}'" in err and msg in err, err
    assert not (tmp_path / "two_args").exists()  # refused before the run folder (and the model) was made


PLUGIN_STATES = """
import numpy as np

from imgalign.trainers.objectives import GRPOObjective
from imgalign.trainers.testing import RunningMeanReward


class NumpyState(RunningMeanReward):
    def state_dict(self):
        return {"total": np.array([self.total]), "count": self.count}


class LambdaState(GRPOObjective):
    def state_dict(self):
        return {"schedule": lambda step: 1.0}

    def load_state_dict(self, state):
        pass
"""


FLAKY_REWARD = """
import os

import torch


def flaky(images, prompts, metadata=None):
    calls = int(os.environ.get("FLAKY_CALLS", "0")) + 1
    os.environ["FLAKY_CALLS"] = str(calls)
    if calls == int(os.environ.get("FLAKY_FAIL_AT", "0")):
        raise RuntimeError("the reward server went away")
    return images[:, 0].mean(dim=(1, 2))
"""


def test_a_step_that_raises_names_the_last_checkpoint_and_resume_auto(sd3_dir, tmp_path, monkeypatch, caplog):
    """A reward (or any plug-in) raising mid-run was its own traceback alone; the log now says which step failed,
    the last whole checkpoint, and that --resume auto continues, which it does once the cause is gone."""
    _user_module(tmp_path, monkeypatch, "cfgtest_flaky", FLAKY_REWARD)
    monkeypatch.setenv("FLAKY_CALLS", "0")
    for fail_at, last in ((2, "step-000001"), (1, "none yet")):
        out = tmp_path / f"run{fail_at}"
        cfg = tiny_config(sd3_dir, out, train__max_steps=3)
        cfg["rewards"]["names"] = ["cfgtest_flaky:flaky"]
        cfg["log"]["checkpoint_every"] = 1
        path = write(cfg, tmp_path / f"c{fail_at}.yaml")
        monkeypatch.setenv("FLAKY_CALLS", "0")
        monkeypatch.setenv("FLAKY_FAIL_AT", str(fail_at))
        caplog.clear()
        with caplog.at_level("ERROR"), pytest.raises(RuntimeError, match="the reward server went away"):
            main(["train", str(path)])
        (msg,) = [r.getMessage() for r in caplog.records if "failed (the error follows)" in r.getMessage()]
        assert f"step {fail_at} failed" in msg and last in msg and "--resume auto" in msg, msg
        monkeypatch.setenv("FLAKY_FAIL_AT", "0")
        assert main(["train", str(path), "--resume", "auto"]) == 0
        assert [r["step"] for r in rows(out)] == [1, 2, 3]


def test_a_plugin_state_that_cannot_be_checkpointed_fails_before_the_model_loads(
    sd3_dir, tmp_path, capsys, monkeypatch
):
    """A stateful reward or an objective whose state_dict() holds a numpy array or a lambda is refused by name at
    set-up: the lambda failed the first save with a pickling traceback (the steps before it lost), and the numpy
    array saved but the checkpoint did not resume (checkpoints load with weights_only=True)."""
    _user_module(tmp_path, monkeypatch, "cfgtest_states", PLUGIN_STATES)
    _no_model_load(monkeypatch)
    for over, msg in [
        (
            {"rewards": {"names": ["cfgtest_states:NumpyState"]}},
            "reward 'running_mean': its state_dict() cannot",
        ),
        (
            {"objective": {"name": "cfgtest_states:LambdaState"}},
            "objective 'cfgtest_states:LambdaState': its",
        ),
    ]:
        cfg = {**tiny_config(sd3_dir, tmp_path / "run"), **over}
        err = _refused(cfg, tmp_path, capsys)
        assert msg in err and "plain Python values" in err, err


def test_nft_objective_two_steps(sd3_dir, tmp_path):
    """objective.name: nft trains on the same rollouts (x0 + advantages) and checkpoints its EMA old policy."""
    out = tmp_path / "run"
    cfg = tiny_config(sd3_dir, out, objective__name="nft", train__updates_per_step=2)
    cfg["objective"].update(penalty="vnorm", penalty_weight=0.1, terms_per_sample=2)
    assert main(["train", str(write(cfg, tmp_path / "c.yaml"))]) == 0
    r = rows(out)
    assert len(r) == 2 and {"nft/loss_plus", "nft/r_mean", "policy/vnorm_ratio"} <= set(r[0])
    ckpt = out / "checkpoints" / "step-000002" / "trainer_state"
    raw = load_file(str(ckpt / "trainable.safetensors"))
    init = initial_trainable(sd3_dir)
    assert not [n for n, t in raw.items() if torch.equal(t, init[n])]
    state = torch.load(ckpt / "objective.pt", weights_only=True)
    assert state["updates"] == 4 and len(state["old"]["shadow"]) == len(raw)


def test_nft_guidance_scale_trains_the_guided_velocity(sd3_dir, tmp_path, caplog):
    """objective.nft.guidance_scale: the loss uses the CFG velocity the rollouts sample with (same rollouts, a
    different loss), and a mismatch with sampling.guidance_scale is warned about."""
    losses = {}
    for w in (1.0, 3.0):
        out = tmp_path / f"run{w}"
        cfg = tiny_config(sd3_dir, out, objective__name="nft", train__max_steps=1)
        cfg["sampling"]["guidance_scale"] = 3.0
        cfg["objective"]["nft"] = {"guidance_scale": w}
        caplog.clear()
        assert main(["train", str(write(cfg, tmp_path / f"c{w}.yaml"))]) == 0
        warned = "trains the velocity at CFG 1 but rollouts sample at CFG 3" in caplog.text
        assert warned == (w == 1.0)
        r = rows(out)[0]
        losses[w] = (r["reward/red_reward/mean"], r["nft/loss_plus"])
    assert losses[1.0][0] == losses[3.0][0]  # the same rollouts
    assert losses[1.0][1] != pytest.approx(losses[3.0][1], rel=1e-4)


def test_nft_training_nfes_count_the_objectives_guidance_scale(sd3_dir, tmp_path):
    """perf/nfe_train counts every transformer evaluation of NFT's update at objective.nft.guidance_scale, not at
    the rollouts' CFG: 8 samples x 2 terms x 2 forwards (the old policy's, v_θ's) cost 32 evaluations at CFG 1 and
    64 at CFG 3; a forward hook on the transformer counts the rows it evaluated."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.testing import first_rollout
    from imgalign.trainers.trainer import FlowGRPOTrainer

    nfes = {}
    for w in (1.0, 3.0):
        cfg_d = tiny_config(
            sd3_dir, tmp_path / f"run{w}", sampling__samples_per_step=8, sampling__batch_size=8
        )
        cfg_d["sampling"]["guidance_scale"] = 3.0
        cfg_d["objective"].update(name="nft", terms_per_sample=2, nft={"guidance_scale": w})
        cfg_d["train"].update(micro_batch_size=4, updates_per_step=1)
        cfg = load_config(FlowGRPOConfig, write(cfg_d, tmp_path / f"c{w}.yaml"))
        tr = FlowGRPOTrainer(cfg, tmp_path / f"run{w}")
        tr.setup()
        ro, _ = first_rollout(tr)
        adv = torch.tensor([1.0, -1.0] * 4)
        rows: list[int] = []
        hook = tr.adapter.transformer.register_forward_hook(
            lambda m, args, kw, out, seen=rows: seen.append(len(kw["hidden_states"])), with_kwargs=True
        )
        nfes[w] = tr._update(0, ro, adv, torch.ones(8, dtype=torch.bool))["perf/nfe_train"]
        hook.remove()
        assert nfes[w] == sum(rows)
    assert nfes == {1.0: 32.0, 3.0: 64.0}


def test_time_budget_stops_early_with_checkpoint(sd3_dir, tmp_path):
    out = tmp_path / "run"
    cfg = tiny_config(sd3_dir, out, train__max_steps=50, train__time_budget_min=0.001)
    assert main(["train", str(write(cfg, tmp_path / "c.yaml"))]) == 0
    assert [x["step"] for x in rows(out)] == [1]
    assert (out / "checkpoints" / "step-000001" / "trainer_state" / "state.json").is_file()


def test_out_of_time_reserves_a_step_the_final_evaluation_and_half_a_step_for_the_save(monkeypatch):
    """Stop when elapsed + step + evaluation (measured, or 3 steps before any) + save (half a step) would pass
    train.time_budget_min; a budget of 0 never stops."""
    from types import SimpleNamespace

    import imgalign.trainers.trainer as T

    monkeypatch.setattr(T.time, "perf_counter", lambda: 100.0)  # 40 s elapsed since t_start = 60
    acc = SimpleNamespace(device="cpu", reduce=lambda t, reduction: t)
    tr = SimpleNamespace(
        cfg=SimpleNamespace(train=SimpleNamespace(time_budget_min=1.0)), acc=acc, is_main=True
    )

    def out(step_sec, eval_sec):
        return T.FlowGRPOTrainer._out_of_time(tr, 60.0, step_sec, eval_sec)

    assert not out(4.0, 13.0) and out(4.0, 14.5)  # 40 + 4 + 13 + 2 = 59; 40 + 4 + 14.5 + 2 = 60.5 > 60
    # no evaluation yet: 40 + 4 + 12 + 2 = 58; 40 + 4.5 + 13.5 + 2.25
    assert not out(4.0, 0.0) and out(4.5, 0.0)
    tr.is_main = False  # only the main process's clock decides; the others learn it through the reduce
    assert not out(4.0, 14.5)
    tr.cfg.train.time_budget_min = 0.0
    assert not out(1000.0, 1000.0)


def test_the_time_budget_reserves_the_measured_evaluation_from_the_at_start_one_on(monkeypatch):
    """The loop hands _out_of_time the last evaluation's seconds: eval.at_start's (before any step) until an
    evaluation after a step replaces it; without any, 0 (then _out_of_time guesses 3 steps)."""
    from types import SimpleNamespace

    import imgalign.trainers.trainer as T

    def run(at_start: bool) -> list[float]:
        seen: list[float] = []
        evals = iter([12.0, 7.0, 5.0])
        cfg = SimpleNamespace(
            train=SimpleNamespace(max_steps=4, unscored_stop_steps=0),
            eval=SimpleNamespace(at_start=at_start, every=2),
            log=SimpleNamespace(progress=False, checkpoint_every=0),
        )

        def out_of_time(t_start, step_sec, eval_sec):
            seen.append(eval_sec)
            return False

        tr = SimpleNamespace(
            cfg=cfg,
            start_step=0,
            is_main=True,
            acc=SimpleNamespace(wait_for_everyone=lambda: None, end_training=lambda: None),
            evaluate=lambda step: {"perf/sec_eval": next(evals)},
            train_step=lambda step: {},
            _out_of_time=out_of_time,
            _log=lambda step, m: None,
            save=lambda step: None,
            _check_trained=lambda steps: None,
        )
        T.FlowGRPOTrainer.train(tr)
        return seen

    # steps 1..3 decide on the last evaluation's cost; step 4 is the last (no decision)
    assert run(True) == [12.0, 12.0, 7.0]
    assert run(False) == [0.0, 0.0, 12.0]


def test_each_process_trains_its_own_consecutive_share_of_the_samples():
    """Process `rank` of the step's N = world * n samples takes samples rank * n ... (rank + 1) * n - 1."""
    from types import SimpleNamespace

    from imgalign.trainers.trainer import FlowGRPOTrainer

    def share(rank: int) -> slice:
        return FlowGRPOTrainer._local_slice(SimpleNamespace(layout={"samples_per_process": 4}, rank=rank))

    assert [share(r) for r in range(3)] == [slice(0, 4), slice(4, 8), slice(8, 12)]


def test_a_metrics_row_is_named_by_the_step_it_ends_in_the_file_and_the_trackers(tmp_path, caplog):
    """_log(step) writes row step + 1 to metrics.jsonl and the trackers; the off-policy warning names the run's
    warm-up (with one, the hint is a lower lr), once per run."""
    from types import SimpleNamespace

    from imgalign.trainers.trainer import FlowGRPOTrainer

    logged: list[tuple[dict, int]] = []
    tr = SimpleNamespace(
        is_main=True,
        out=tmp_path,
        _warned_off_policy=False,
        cfg=SimpleNamespace(train=SimpleNamespace(lr=1e-3, warmup_steps=3)),
        acc=SimpleNamespace(trackers=["fake"], log=lambda m, step: logged.append((m, step))),
    )
    with caplog.at_level("WARNING"):
        FlowGRPOTrainer._log(tr, 4, {"policy/approx_kl": 50.0})
        FlowGRPOTrainer._log(tr, 5, {"policy/approx_kl": 60.0})
    assert [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [5, 6]
    assert [s for _, s in logged] == [5, 6] and logged[0][0] == {"policy/approx_kl": 50.0}
    assert caplog.text.count("policy/approx_kl = ") == 1 and "step 5: policy/approx_kl = 50" in caplog.text
    assert "warm-up 3 updates" in caplog.text and "lower train.lr" in caplog.text
    assert "set train.warmup_steps" not in caplog.text


def test_log_trackers_names_accelerates_trackers_and_all_is_not_a_module(monkeypatch):
    """log.trackers: none logs nowhere; a comma list is passed to accelerate as its names; 'all' (accelerate's every
    installed tracker) is no module to look for, so it is not refused as one that is not installed."""
    import importlib.util
    from types import SimpleNamespace

    from imgalign.config import ConfigError
    from imgalign.trainers.trainer import FlowGRPOTrainer

    def fake(trackers: str) -> SimpleNamespace:
        return SimpleNamespace(cfg=SimpleNamespace(log=SimpleNamespace(trackers=trackers)))

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if name == "tensorboard" else None)
    monkeypatch.setattr("accelerate.tracking.get_available_trackers", lambda: ["tensorboard"])
    assert FlowGRPOTrainer._trackers(fake("none")) == []
    assert FlowGRPOTrainer._trackers(fake("all")) == ["all"]
    assert FlowGRPOTrainer._trackers(fake(" tensorboard, all ")) == ["tensorboard", "all"]
    with pytest.raises(ConfigError, match="log.trackers: aim is not installed"):
        FlowGRPOTrainer._trackers(fake("tensorboard,aim"))
    # 'all' with no tracker installed: accelerate's warning named its log_with=all, and nothing was tracked
    monkeypatch.setattr("accelerate.tracking.get_available_trackers", lambda: [])
    with pytest.raises(ConfigError, match="log.trackers: all names every installed tracker, and none is"):
        FlowGRPOTrainer._trackers(fake("all"))
    assert FlowGRPOTrainer._trackers(fake("tensorboard,all")) == ["tensorboard", "all"]


def test_rollouts_jsonl_has_one_row_per_sample_with_each_rewards_score_and_its_advantage(tmp_path):
    """log.save_rollouts: row i of step s names metrics row s + 1, sample i, its group's prompt, every reward's
    score of it by name, its advantage and whether it trained."""
    from types import SimpleNamespace

    from imgalign.trainers.trainer import FlowGRPOTrainer

    tr = SimpleNamespace(
        out=tmp_path,
        cfg=SimpleNamespace(sampling=SimpleNamespace(group_size=2)),
        rewards={"a": None, "b": None},
    )
    scores = torch.tensor([[0.1, 0.2, 0.3, 0.4], [1.0, 2.0, 3.0, float("nan")]])  # [K, N]
    bal = SimpleNamespace(
        advantages=torch.tensor([-1.0, 1.0, 0.5, -0.5]), valid=torch.tensor([1, 1, 1, 0]).bool()
    )
    FlowGRPOTrainer._save_rollouts(tr, 6, SimpleNamespace(prompts=["p", "q"]), scores, bal)
    got = [json.loads(line) for line in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert [(r["step"], r["sample"], r["prompt"]) for r in got] == [
        (7, 0, "p"),
        (7, 1, "p"),
        (7, 2, "q"),
        (7, 3, "q"),
    ]
    assert [r["rewards"]["a"] for r in got] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert [r["rewards"]["b"] for r in got[:3]] == [1.0, 2.0, 3.0] and math.isnan(got[3]["rewards"]["b"])
    assert [r["advantage"] for r in got] == [-1.0, 1.0, 0.5, -0.5]
    assert [r["valid"] for r in got] == [True, True, True, False]


def test_step_rows_keeps_the_complete_rows_and_skips_any_line_without_a_step(tmp_path):
    """A log's rows by step, for cutting it back on resume: a line cut short by a crash, a row without a step (or
    not an object, or with a step that is no number) is skipped instead of failing the resume."""
    from imgalign.trainers.trainer import _step_rows

    path = tmp_path / "metrics.jsonl"
    assert _step_rows(path) == []
    lines = ['{"step": 1, "x": 0.5}', '{"x": 1}', "7", '{"step": "two"}', '{"step": 2.0}', '{"step": 3, "x"']
    path.write_text("\n".join(lines) + "\n")
    assert _step_rows(path) == [(1, lines[0]), (2, lines[4])]


def test_sample_grid_shows_the_first_16_images_8_to_a_row_with_their_prompts(tmp_path):
    """_save_grid: the first 16 images in rows of 8 (one row of fewer when there are fewer), left to right then
    top to bottom; the .txt beside it lists the prompts of the images shown, one a line."""
    from PIL import Image

    from imgalign.trainers.trainer import FlowGRPOTrainer

    h, w = 2, 3  # not square: a swapped axis shows
    images = torch.zeros(20, 3, h, w)
    for i in range(20):
        images[i, 0] = i * 10 / 255  # red = 10 * index
    path = tmp_path / "g.png"
    FlowGRPOTrainer._save_grid(images, [f"p{i}" for i in range(20)], path)
    grid = Image.open(path).convert("RGB")
    assert grid.size == (8 * w, 2 * h)
    shown = [grid.getpixel(((i % 8) * w + 1, (i // 8) * h + 1))[0] for i in range(16)]
    assert shown == [10 * i for i in range(16)]
    assert path.with_suffix(".txt").read_text() == "".join(f"p{i}\n" for i in range(16))
    FlowGRPOTrainer._save_grid(images[:3], None, path)  # fewer than 8: one row of them, no .txt rewritten
    assert Image.open(path).size == (3 * w, h)
    FlowGRPOTrainer._save_grid(images[:10], None, path)  # 10: a second row, partly filled
    assert Image.open(path).size == (8 * w, 2 * h)


@pytest.mark.parametrize(
    ("guidance", "use_ema", "gs", "weight"), [(0.0, True, 0.0, 7.0), (-1.0, False, 4.5, 1.0)]
)
def test_an_evaluation_runs_at_its_guidance_scale_with_the_ema_weights_when_asked(
    tmp_path, monkeypatch, guidance, use_ema, gs, weight
):
    """eval.guidance_scale applies as given, 0 (no CFG) included; -1 is the policy's sampling.guidance_scale. The
    suite sees the EMA weights under eval.use_ema and the raw ones otherwise, which it leaves in place. The row in
    eval.jsonl is named by the step given, with the seconds it took."""
    from types import SimpleNamespace

    import imgalign.trainers.evaluation as E
    from imgalign.trainers.trainer import EMA, FlowGRPOTrainer

    seen: list[tuple[float, float]] = []

    def suite(adapter, model, ev, scale):
        seen.append((scale, float(model.weight)))
        return {"eval/x": 0.5}, torch.zeros(0, 3, 2, 2)

    monkeypatch.setattr(E, "shapes_suite", suite)
    monkeypatch.setattr(E, "eval_prompt_dependence", lambda *a: {})
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    ema = EMA([model.weight], 0.5)
    ema.shadow = [torch.full((1, 1), 7.0)]
    tr = SimpleNamespace(
        cfg=SimpleNamespace(
            eval=SimpleNamespace(suite="shapes", guidance_scale=guidance, vnorm_images=0, use_ema=use_ema),
            sampling=SimpleNamespace(guidance_scale=4.5),
        ),
        acc=SimpleNamespace(unwrap_model=lambda m: m),
        adapter=None,
        model=model,
        ema=ema,
        sampler=SimpleNamespace(test=[]),
        out=tmp_path,
        _warn_prompt_independence=lambda step, out: None,
    )
    out = FlowGRPOTrainer._evaluate_main(tr, 3)
    assert seen == [(gs, weight)] and float(model.weight.detach()) == 1.0
    row = json.loads((tmp_path / "eval.jsonl").read_text())
    assert row["step"] == 3 and row["eval/x"] == 0.5 and row["perf/sec_eval"] == out["perf/sec_eval"] >= 0


def test_eval_at_start_evaluates_the_base_model_once_and_a_resume_does_not_again(sd3_dir, tmp_path):
    """eval.at_start: step 0 (the base model) then the end of each run; a resumed run starts from trained weights,
    so it has no step 0 to evaluate."""
    out = tmp_path / "run"
    prompts = tmp_path / "p.txt"
    prompts.write_text("a red circle\na blue square\na green triangle\n")
    cfg = tiny_config(sd3_dir, out, train__max_steps=1, sampling__num_steps=2)
    cfg["prompts"] = {"source": str(prompts), "test_fraction": 0.34}
    cfg["eval"] = {"every": 0, "at_start": True, "suite": "reward", "images_per_prompt": 1, "num_steps": 1}
    path = write(cfg, tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0
    assert main(["train", str(path), "--resume", "auto", "--max-steps", "2"]) == 0
    assert [json.loads(x)["step"] for x in (out / "eval.jsonl").read_text().splitlines()] == [0, 1, 2]


def test_train_help_says_how_to_start_several_cpu_processes(capsys):
    """`accelerate launch --cpu --num_processes 2` starts one process and nothing in it can tell; --help said
    nothing of the form that works (it was only in the module docstring)."""
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes N" in out


def test_train_help_says_relative_paths_are_read_from_the_working_folder(capsys):
    """Nothing said whether a config's relative model.path, prompts.source and log.output_dir are read from the
    working folder or the config file's (the working folder: check_prompt_source's error names it)."""
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "are read from the working folder, not from the config file's folder" in out
    assert "~ and $HOME are not expanded" in out.replace("``", "")


def test_print_config_and_max_steps_override(sd3_dir, tmp_path, capsys):
    cfg = write(tiny_config(sd3_dir, tmp_path / "run"), tmp_path / "c.yaml")
    other = tmp_path / "other"
    argv = ["train", str(cfg), "--max-steps", "7", "--set", "train.lr=3e-4", "--output-dir", str(other)]
    assert main([*argv, "--set", "train.weight_decay=0.5", "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["train"]["max_steps"] == 7 and printed["train"]["lr"] == pytest.approx(3e-4)
    assert printed["train"]["weight_decay"] == 0.5  # every --set applies, not only the last
    assert printed["log"]["output_dir"] == str(other)  # --output-dir overrides the config's log.output_dir


def test_the_dedicated_flags_win_over_set_and_max_steps_zero_is_checked(sd3_dir, tmp_path, capsys):
    """--max-steps and --output-dir override the same key given with --set, whatever the order; --max-steps 0 is
    checked like train.max_steps=0, not dropped as if absent."""
    cfg = write(tiny_config(sd3_dir, tmp_path / "run"), tmp_path / "c.yaml")
    a, b = tmp_path / "a", tmp_path / "b"
    argv = ["train", str(cfg), "--max-steps", "7", "--set", "train.max_steps=3", "--output-dir", str(b)]
    assert main([*argv, "--set", f"log.output_dir={a}", "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["train"]["max_steps"] == 7 and printed["log"]["output_dir"] == str(b)
    assert main(["train", str(cfg), "--max-steps", "0", "--print-config"]) == 2
    assert "train.max_steps must be >= 1" in capsys.readouterr().err
    # an empty --output-dir (from an unset shell variable) is refused, not dropped for the config's folder
    assert main(["train", str(cfg), "--output-dir", "", "--print-config"]) == 2
    assert "--output-dir is empty (an unset shell variable?): give a run folder" in capsys.readouterr().err
    # a misspelt reward is refused as a run would refuse it, not printed as a config
    assert main(["train", str(cfg), "--set", "rewards.names=[nosuch]", "--print-config"]) == 2
    assert "rewards.names: unknown reward 'nosuch'" in capsys.readouterr().err
    # nor a batch that does not split into the updates (the run refused it at once; --print-config showed it)
    assert main(["train", str(cfg), "--set", "train.updates_per_step=3", "--print-config"]) == 2
    assert "do not split into train.updates_per_step=3" in capsys.readouterr().err


def test_an_accelerate_config_as_the_training_config_says_where_it_goes(capsys, tmp_path):
    """examples/accelerate/*.yaml given as CONFIG was 'unknown config key compute_environment'; the error now says
    it is accelerate's file and how the two configs are passed."""
    from imgalign.commands.train import EXAMPLES

    acc = EXAMPLES / "accelerate" / "fsdp.yaml"
    assert main(["train", str(acc), "--print-config"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{acc} is an accelerate config (compute_environment), not a training config" in err
    assert f"accelerate launch --config_file {acc} -m imgalign train" in err
    # a hand-written one whose first key is distributed_type is told apart the same way
    mine = tmp_path / "mine.yaml"
    mine.write_text("distributed_type: MULTI_GPU\nnum_processes: 2\ncompute_environment: LOCAL_MACHINE\n")
    assert main(["train", str(mine), "--print-config"]) == 2
    assert f"{mine} is an accelerate config (distributed_type)" in " ".join(capsys.readouterr().err.split())


def test_no_config_is_the_embedded_default(capsys):
    assert main(["train", "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    shipped = yaml.safe_load((REPO / "examples" / "shapes" / "flow_grpo.yaml").read_text())
    assert printed["model"]["path"] == "shapes" and printed["rewards"]["names"] == shipped["rewards"]["names"]
    assert printed["train"]["max_steps"] == shipped["train"]["max_steps"]
    assert printed["sampling"]["samples_per_step"] == shipped["sampling"]["samples_per_step"]


def test_describe_lists_each_key_with_its_default_and_loads_no_config(capsys, monkeypatch):
    import imgalign.commands.train as train_cmd

    def no_config(args):
        raise AssertionError("--describe loaded a config")

    monkeypatch.setattr(train_cmd, "load_train_config", no_config)
    assert main(["train", "--describe"]) == 0
    assert "train.max_steps = 100\n    training steps (one rollout batch each)\n" in capsys.readouterr().out


def test_train_checks_then_runs_with_resume_and_prints_what_the_run_measured(tmp_path, capsys, monkeypatch):
    """The command: preflight before the run, --resume passed on, then the run's summary lines (here a reward's
    windowed change, from its metrics.jsonl) and where its report comes from. The trainer is stubbed."""
    import imgalign.trainers.trainer as trainer

    calls = []

    def fake_run(cfg, out, resume):
        calls.append(("run", out, resume))
        Path(out).mkdir(parents=True)
        rows = [{"step": s, "reward/red/mean": float(s)} for s in (1, 2, 3, 4)]
        (Path(out) / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    monkeypatch.setattr(trainer, "preflight", lambda cfg: calls.append(("preflight",)))
    monkeypatch.setattr(trainer, "run", fake_run)
    out = tmp_path / "run"
    assert main(["train", "--output-dir", str(out), "--resume", "auto", "--max-steps", "4"]) == 0
    assert calls == [("preflight",), ("run", str(out), "auto")]
    printed = capsys.readouterr().out
    # windows of 2: mean(3, 4) - mean(1, 2) = 2, standard error sqrt((0.5 + 0.5) / 2)
    assert f"done: {out}\n  `reward/red/mean` moved +2 ± 0.71 (standard error)" in printed
    assert printed.endswith(f"  curves and a summary: imgalign report {out}\n")


def _cli(args: list[str], **kw) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-m", "imgalign", *args], env=env, cwd=REPO, **kw)


def test_resume_after_sigkill_is_bitwise_equal(sd3_dir, tmp_path):
    steps = 4
    over = dict(train__max_steps=steps, train__ema_decay=0.5, train__updates_per_step=2)
    two_rewards = ["imgalign.trainers.testing:red_reward", "imgalign.trainers.testing:RunningMeanReward"]
    # uninterrupted reference run
    ref = tmp_path / "ref"
    cfg = tiny_config(sd3_dir, ref, **over)
    cfg["rewards"] = {"names": two_rewards, "weights": [1.0, 0.5]}  # a stateful reward: its state must resume
    cfg["log"]["checkpoint_every"] = 1
    assert main(["train", str(write(cfg, tmp_path / "ref.yaml"))]) == 0
    # the same run, killed with SIGKILL once checkpoint 2 exists, then resumed
    out = tmp_path / "killed"
    cfg["log"]["output_dir"] = str(out)
    cfg["log"]["keep_last"] = 10
    path = write(cfg, tmp_path / "k.yaml")
    proc = _cli(["train", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 900  # generous: a loaded machine
    while not (out / "checkpoints" / "step-000002" / "trainer_state" / "state.json").exists():
        assert proc.poll() is None, "training ended before it could be killed"
        assert time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = sorted(p.name for p in (out / "checkpoints").glob("step-*"))
    assert "step-000004" not in done, "the run finished before the kill; nothing was tested"
    assert main(["train", str(path), "--resume", "auto"]) == 0
    a = load_file(str(ref / "checkpoints" / "step-000004" / "trainer_state" / "trainable.safetensors"))
    b = load_file(str(out / "checkpoints" / "step-000004" / "trainer_state" / "trainable.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ea = load_file(str(ref / "checkpoints" / "step-000004" / "trainer_state" / "ema.safetensors"))
    eb = load_file(str(out / "checkpoints" / "step-000004" / "trainer_state" / "ema.safetensors"))
    assert all(torch.equal(ea[k], eb[k]) for k in ea)
    # metrics of the resumed steps equal the reference's
    ra = {x["step"]: x for x in rows(ref)}
    rb = {x["step"]: x for x in rows(out)}
    assert ra[4]["reward/red_reward/mean"] == rb[4]["reward/red_reward/mean"]
    assert ra[4]["reward/running_mean/count"] == rb[4]["reward/running_mean/count"] == 16
    assert [x["step"] for x in rows(out)] == [
        1,
        2,
        3,
        4,
    ]  # steps logged after the last checkpoint are not doubled


@contextlib.contextmanager
def lock_held_elsewhere(lock: Path) -> Iterator[None]:
    """The output folder's lock file `lock` held (flock, exclusive) by another process for the block's time, as a
    running job holds it; the process is killed after (no stale lock is left)."""
    code = (
        f"import fcntl, os, time; fd = os.open({str(lock)!r}, os.O_RDWR | os.O_CREAT); "
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(120)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.kill()
        holder.wait()


def test_a_second_start_of_the_same_job_into_a_folder_being_written_is_refused(sd3_dir, tmp_path, capsys):
    """Two `imgalign train` started at once into one --output-dir both passed the "already holds a run" check (neither
    had written yet) and then wrote the same metrics.jsonl (every step logged twice) and checkpoints: the folder's
    lock, held by a running job (here another process), refuses the second, which writes nothing; once the other
    process is gone (killed: no stale lock), the job runs."""
    out = tmp_path / "run"
    out.mkdir()
    path = write(tiny_config(sd3_dir, out, train__max_steps=1), tmp_path / "c.yaml")
    with lock_held_elsewhere(out / ".lock"):
        assert main(["train", str(path)]) == 2
        assert "is being written by another imgalign train" in capsys.readouterr().err
        assert not (out / "metrics.jsonl").exists() and not (out / "checkpoints").exists()
    assert main(["train", str(path)]) == 0
    assert [x["step"] for x in rows(out)] == [1]


def test_a_refused_second_resume_leaves_the_checkpoint_the_running_job_is_writing(sd3_dir, tmp_path, capsys):
    """`--resume auto` first cleans what a killed save left (``.tmp-step-N``), and did so before taking the folder's
    lock: a second start of a job that is still training deleted the checkpoint it was writing, then was refused by
    the lock, and the running job failed in its save ("cannot write ... is the disk full?"). It is refused first."""
    out = tmp_path / "run"
    saving = out / "checkpoints" / ".tmp-step-000002" / "trainer_state"
    saving.mkdir(parents=True)
    (saving / "rng_0.json").write_text("{}")
    path = write(tiny_config(sd3_dir, out, train__max_steps=3), tmp_path / "c.yaml")
    with lock_held_elsewhere(out / ".lock"):
        assert main(["train", str(path), "--resume", "auto"]) == 2
        assert "is being written by another imgalign train" in capsys.readouterr().err
        assert (saving / "rng_0.json").is_file()  # the running job's save in progress is untouched


def test_ctrl_c_names_the_last_checkpoint_and_never_sends_a_branch_back_to_the_base_model(
    sd3_dir, tmp_path, monkeypatch
):
    """Ctrl-C in train said "add --resume auto ... to continue from the last one" whatever the folder held: a run
    begun with --resume CHECKPOINT of another folder, interrupted before its first save, then started over from the
    base model (--resume auto finds no checkpoint in the new folder). The line names the last checkpoint, or says to
    run the same command (with its --resume) again."""
    import imgalign.trainers.trainer as T
    from imgalign.cli import Interrupted

    def interrupted(cfg, out, resume):
        Path(out).mkdir(parents=True, exist_ok=True)
        raise KeyboardInterrupt

    monkeypatch.setattr(T, "run", interrupted)
    out = tmp_path / "run"
    other = _state_only_checkpoint(tmp_path / "old" / "checkpoints" / "step-000007", 7)
    path = write(tiny_config(sd3_dir, out), tmp_path / "c.yaml")
    with pytest.raises(Interrupted) as e:
        main(["train", str(path), "--resume", str(other)])
    assert "--resume auto" not in str(e.value)
    assert f"run the same command again (with --resume {other})" in str(e.value)
    with pytest.raises(Interrupted, match="first checkpoint .* --resume auto to start it again"):
        main(["train", str(path)])
    last = _state_only_checkpoint(out / "checkpoints" / "step-000002", 2)
    with pytest.raises(
        Interrupted, match=f"its last checkpoint, {last}, is whole: continue from it with --resume auto"
    ):
        main(["train", str(path), "--resume", str(other)])


def _another_process_locks(out: Path) -> bool:
    """Whether another process can take the lock of output folder `out` (RUN/.lock) now (and let it go)."""
    code = (
        f"import fcntl, os, sys; fd = os.open({str(out / '.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
        "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError:\n    sys.exit(1)"
    )
    return subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_a_finished_run_lets_another_process_take_its_output_folder(sd3_dir, tmp_path):
    """run() holds RUN/.lock while it trains and lets it go when it ends: an imgalign train in another process may
    then continue the run (a caller that trains in-process and then starts `imgalign train --resume auto` in a
    subprocess, as a sweep or a notebook does, was refused as a second start of the same job)."""
    out = tmp_path / "run"
    assert (
        main(["train", str(write(tiny_config(sd3_dir, out, train__max_steps=1), tmp_path / "c.yaml"))]) == 0
    )
    assert (out / ".lock").is_file()
    assert _another_process_locks(out)


def test_run_keeps_only_the_warnings_of_the_other_processes(tmp_path, monkeypatch, caplog):
    """The other processes (RANK >= 1) would repeat the main process's INFO lines: run() lets only their warnings
    through while they train; the main process (RANK 0, or unset in a one-process run) logs its INFO lines, and the
    caller's level comes back after."""
    import logging

    import imgalign.trainers.trainer as trainer

    class Stub:
        """The trainer's interface to run(), logging one INFO line and one warning as it trains."""

        def __init__(self, cfg, output_dir) -> None:
            self.out = Path(output_dir)

        def setup(self, resume) -> None:
            pass

        def train(self) -> dict[str, float]:
            trainer.log.info("info line")
            trainer.log.warning("warning line")
            return {}

    monkeypatch.setattr(trainer, "FlowGRPOTrainer", Stub)
    caplog.set_level(logging.INFO, logger="imgalign")
    both, warning = ["info line", "warning line"], ["warning line"]
    monkeypatch.setenv("WORLD_SIZE", "4")  # a launch (without one, every process is the main one)
    for rank, want in ((None, both), ("0", both), ("1", warning), ("3", warning)):
        if rank is None:
            monkeypatch.delenv("RANK", raising=False)
        else:
            monkeypatch.setenv("RANK", rank)
        caplog.clear()
        assert trainer.run(None, tmp_path / "run") == {}
        assert [r.getMessage() for r in caplog.records] == want, rank
        assert logging.getLogger("imgalign").level == logging.INFO


def test_a_folder_holding_a_run_is_refused_without_resume(sd3_dir, tmp_path, capsys):
    """Training into a folder that holds a run, without --resume, would append to its metrics and overwrite its
    checkpoints: refused before any model loads, the earlier run untouched. A stale metrics row past the last
    checkpoint (a run killed between the two) is dropped on --resume auto."""
    out = tmp_path / "run"
    path = write(tiny_config(sd3_dir, out, train__max_steps=1), tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0
    before = (out / "metrics.jsonl").read_text()
    assert main(["train", str(path), "--max-steps", "2"]) == 2
    assert "already holds a training run" in capsys.readouterr().err
    assert (out / "metrics.jsonl").read_text() == before
    with open(out / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 2, "stale": 1.0}) + "\n")
    assert main(["train", str(path), "--max-steps", "2", "--resume", "auto"]) == 0
    r = rows(out)
    assert [x["step"] for x in r] == [1, 2] and "stale" not in r[1]
    assert main(["train", str(path), "--output-dir", str(path)]) == 2  # a file
    assert "is a file" in capsys.readouterr().err


def test_a_damaged_checkpoint_is_named_with_what_to_do(sd3_dir, tmp_path, capsys):
    """A checkpoint file cut short after it was published (a failing disk, a copy interrupted) stops --resume auto
    with the file named and what to do, not a safetensors or pickle traceback; mended, the run resumes."""
    out = tmp_path / "run"
    path = write(tiny_config(sd3_dir, out, train__max_steps=1), tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0
    st = out / "checkpoints" / "step-000001" / "trainer_state"
    for name in ("trainable.safetensors", "optimizer.pt", "rng_0.json", "state.json"):
        f = st / name
        data = f.read_bytes()
        f.write_bytes(data[: len(data) // 2])
        assert main(["train", str(path), "--resume", "auto", "--max-steps", "2"]) == 2
        err = capsys.readouterr().err
        assert f"{f} cannot be read" in err and f"checkpoint {st.parent} is damaged" in err, err
        # the run's only checkpoint: no "--resume .../step-…" to look for
        assert "no earlier checkpoint" in err and "another --output-dir" in err and "step-…" not in err, err
        assert "Traceback" not in err
        f.write_bytes(data)
    assert main(["train", str(path), "--resume", "auto", "--max-steps", "2"]) == 0
    assert [r["step"] for r in rows(out)] == [1, 2]
    # with an earlier checkpoint, the error names it (the newest before the damaged one)
    (out / "checkpoints" / "step-000002" / "trainer_state" / "state.json").write_text("{")
    assert main(["train", str(path), "--resume", "auto", "--max-steps", "3"]) == 2
    err = capsys.readouterr().err
    assert f"--resume {out / 'checkpoints' / 'step-000001'})" in err and "no earlier" not in err, err
    # ... but not one that is damaged too (a cut optimizer.pt): the newest earlier one that looks whole
    ckpts = out / "checkpoints"
    shutil.copytree(ckpts / "step-000001", ckpts / "step-000000")
    opt = ckpts / "step-000001" / "trainer_state" / "optimizer.pt"
    opt.write_bytes(opt.read_bytes()[:-100])
    assert main(["train", str(path), "--resume", "auto", "--max-steps", "3"]) == 2
    err = capsys.readouterr().err
    assert f"--resume {ckpts / 'step-000000'})" in err and "step-000001)" not in err, err
    trainable = ckpts / "step-000000" / "trainer_state" / "trainable.safetensors"
    trainable.write_bytes(trainable.read_bytes()[:-1])
    assert main(["train", str(path), "--resume", "auto", "--max-steps", "3"]) == 2
    err = capsys.readouterr().err
    assert f"The run's earlier checkpoints in {ckpts} are damaged too (e.g. {opt})" in err, err
    assert "--resume" not in err.split("damaged too")[1], err


def test_a_setting_added_after_the_checkpoint_at_its_default_is_no_change(sd3_dir, tmp_path, caplog, capsys):
    """A checkpoint written before a setting existed (here rewards.marble.all_terms) has another config hash and no
    such key; resuming it warned 'changed config (rewards.marble.all_terms: None -> False)'."""
    out = tmp_path / "run"
    path = write(tiny_config(sd3_dir, out, train__max_steps=1), tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0
    st = out / "checkpoints" / "step-000001" / "trainer_state"
    saved = yaml.safe_load((st / "config.yaml").read_text())
    del saved["rewards"]["marble"]["all_terms"]  # as an older imgalign wrote it
    (st / "config.yaml").write_text(yaml.safe_dump(saved))
    state = json.loads((st / "state.json").read_text())
    (st / "state.json").write_text(json.dumps({**state, "config_hash": "0" * 16}))
    with caplog.at_level("WARNING"):
        assert main(["train", str(path), "--resume", "auto", "--max-steps", "2"]) == 0
    assert "changed config" not in caplog.text
    with caplog.at_level("WARNING"):  # resumed at train.max_steps: nothing to train, and it says so
        caplog.clear()
        assert main(["train", str(path), "--resume", "auto", "--max-steps", "2"]) == 0
    assert "is at step 2 and train.max_steps is 2: nothing to train" in caplog.text
    # another hash and a config that cannot be read: the changes cannot be named, but the change is still reported
    st = out / "checkpoints" / "step-000002" / "trainer_state"
    (st / "config.yaml").write_text("train: [\n")
    state = json.loads((st / "state.json").read_text())
    (st / "state.json").write_text(json.dumps({**state, "config_hash": "0" * 16}))
    with caplog.at_level("WARNING"):
        caplog.clear()
        assert main(["train", str(path), "--resume", "auto", "--max-steps", "2"]) == 0
    assert "with a changed config (see its config.yaml)" in caplog.text
    # a checkpoint of another process count is refused (each process's share and RNG state would differ)
    state = json.loads((st / "state.json").read_text())
    (st / "state.json").write_text(json.dumps({**state, "num_processes": 2}))
    capsys.readouterr()
    assert main(["train", str(path), "--resume", "auto", "--max-steps", "3"]) == 2
    assert "was written by 2 processes; resume with the same number" in capsys.readouterr().err


def test_resuming_with_a_changed_config_names_the_changes(sd3_dir, tmp_path, caplog):
    """A changed setting is named; so is an edited prompt file (its split and sequence are no longer the run's)."""
    out = tmp_path / "run"
    prompts = tmp_path / "p.txt"
    prompts.write_text("a red circle\na blue square\n")
    cfg = tiny_config(sd3_dir, out, train__max_steps=1, prompts__source=str(prompts))
    path = write(cfg, tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0
    prompts.write_text("a red circle\na blue square\na green cross\n")
    with caplog.at_level("WARNING"):
        argv = ["train", str(path), "--resume", "auto", "--max-steps", "2", "--set", "train.lr=0.002"]
        assert main(argv) == 0
    assert "changed config (train.lr: 0.001 -> 0.002)" in caplog.text
    assert f"prompts.source {str(prompts)!r} changed since checkpoint" in caplog.text
    assert yaml.safe_load((out / "config.until-step-000001.yaml").read_text())["train"]["lr"] == 0.001
    assert yaml.safe_load((out / "config.yaml").read_text())["train"]["lr"] == 0.002
    # resumed from that run's checkpoint into a new --output-dir: the config it was trained with is kept there too
    new = tmp_path / "new"
    ckpt = out / "checkpoints" / "step-000002"
    argv = ["train", str(path), "--resume", str(ckpt), "--output-dir", str(new), "--max-steps", "3"]
    assert main([*argv, "--set", "train.lr=0.003"]) == 0
    assert yaml.safe_load((new / "config.until-step-000002.yaml").read_text())["train"]["lr"] == 0.002
    assert not (out / "config.until-step-000002.yaml").exists()


def test_a_resume_continues_the_runs_nfe_total(sd3_dir, tmp_path):
    """perf/nfe_total counts the whole run's forward passes: a resumed step adds to the checkpoint's total, not to
    zero (12 per step here: 4 samples x 3 steps, no CFG)."""
    out = tmp_path / "run"
    path = write(tiny_config(sd3_dir, out, train__max_steps=1), tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0
    assert main(["train", str(path), "--resume", "auto", "--max-steps", "2"]) == 0
    assert [(x["perf/nfe"], x["perf/nfe_total"]) for x in rows(out)] == [(12, 12), (12, 24)]


def test_a_checkpoint_without_its_prompt_position_continues_the_prompt_sequence(sd3_dir, tmp_path):
    """A checkpoint that saved no prompt_position (an older imgalign) resumes where its step puts the prompt file's
    sequence (step x sampling.prompts_per_step draws), so the resumed step trains the prompts an uninterrupted run
    trains, not the first ones again."""
    prompts = tmp_path / "p.txt"
    prompts.write_text(
        "".join(f"a photo of {n} cats\n" for n in ("one", "two", "three", "four", "five", "six"))
    )

    def step_prompts(out: Path) -> dict[int, list[str]]:
        got: dict[int, list[str]] = {}
        for line in (out / "rollouts.jsonl").read_text().splitlines():
            r = json.loads(line)
            got.setdefault(r["step"], []).append(r["prompt"])
        return got

    def config(out: Path, steps: int) -> Path:
        cfg = tiny_config(sd3_dir, out, train__max_steps=steps, prompts__source=str(prompts))
        cfg["log"]["save_rollouts"] = True
        return write(cfg, tmp_path / f"{out.name}.yaml")

    ref = tmp_path / "ref"
    assert main(["train", str(config(ref, 2))]) == 0
    out = tmp_path / "run"
    path = config(out, 1)
    assert main(["train", str(path)]) == 0
    state_json = out / "checkpoints" / "step-000001" / "trainer_state" / "state.json"
    state = json.loads(state_json.read_text())
    del state["prompt_position"]  # as an older imgalign wrote it
    state_json.write_text(json.dumps(state))
    assert main(["train", str(path), "--resume", "auto", "--max-steps", "2"]) == 0
    want = step_prompts(ref)
    assert want[1] != want[2]  # the sequence moved on: a restart at its first prompts would show
    assert step_prompts(out) == want


def test_a_stateful_reward_missing_from_the_checkpoint_starts_fresh_and_says_so(sd3_dir, tmp_path, caplog):
    """A stateful reward added on resume has no state in the checkpoint: it starts fresh, with a warning; one whose
    state the checkpoint holds is loaded without it."""
    out = tmp_path / "run"
    cfg = tiny_config(sd3_dir, out, train__max_steps=1)
    assert main(["train", str(write(cfg, tmp_path / "c.yaml"))]) == 0
    cfg["rewards"]["names"] = [
        "imgalign.trainers.testing:red_reward",
        "imgalign.trainers.testing:RunningMeanReward",
    ]
    path = write(cfg, tmp_path / "c2.yaml")
    fresh = "stateful reward(s) ['running_mean'] are not in checkpoint"
    with caplog.at_level("WARNING"):
        assert main(["train", str(path), "--resume", "auto", "--max-steps", "2"]) == 0
    assert f"{fresh} {out / 'checkpoints' / 'step-000001'}: they start fresh" in caplog.text
    assert rows(out)[1]["reward/running_mean/count"] == 4  # fresh: only the resumed step's images
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert main(["train", str(path), "--resume", "auto", "--max-steps", "3"]) == 0
    assert "stateful reward(s)" not in caplog.text
    assert rows(out)[2]["reward/running_mean/count"] == 8  # its state of step 2 went on


def test_a_plugin_objective_resumed_from_a_checkpoint_without_its_state_starts_fresh(sd3_dir, tmp_path):
    """A plug-in objective with load_state_dict, resumed from a checkpoint that holds no objective.pt (written with
    an objective that keeps no state, e.g. grpo), starts from its own initial state instead of failing on the
    missing file."""
    out = tmp_path / "run"
    cfg = tiny_config(sd3_dir, out, train__max_steps=1)
    assert main(["train", str(write(cfg, tmp_path / "c.yaml"))]) == 0
    assert not (out / "checkpoints" / "step-000001" / "trainer_state" / "objective.pt").exists()
    cfg["objective"]["name"] = "imgalign.trainers.testing:counting_grpo"
    assert main(["train", str(write(cfg, tmp_path / "c2.yaml")), "--resume", "auto", "--max-steps", "2"]) == 0
    state = torch.load(
        out / "checkpoints" / "step-000002" / "trainer_state" / "objective.pt", weights_only=True
    )
    assert state == {"updates": 1}  # counted from 0: the resumed step's one update


def test_a_run_names_the_settings_its_methods_do_not_read(sd3_dir, tmp_path, caplog):
    """objective.name switched to grpo on an NFT config: the NFT section's changed values are named, once, before
    the model loads (they trained nothing)."""
    cfg = tiny_config(sd3_dir, tmp_path / "run", train__max_steps=1)
    cfg["objective"]["nft"] = {"beta": 0.5}
    with caplog.at_level("WARNING"):
        assert main(["train", str(write(cfg, tmp_path / "c.yaml"))]) == 0
    unused = [r.getMessage() for r in caplog.records if "not used by this run" in r.getMessage()]
    assert unused == [
        "these settings are not used by this run's methods: objective.nft.beta (read with objective.name=nft)"
    ]


def test_the_shapes_eval_suite_on_another_model_is_warned_before_it_loads(sd3_dir, tmp_path, caplog):
    """eval.suite's default (shapes) on a model that is not of the shapes family (here a tiny random SD3 pipeline;
    in use SD3.5 with a config that left `eval` out) judged it with the shapes detector, silently; the embedded
    shapes model, and a run with eval.every=-1, are not warned."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import FlowGRPOTrainer

    def warned(model: str, every: int) -> list[str]:
        cfg = tiny_config(Path(model), tmp_path / f"run{len(caplog.records)}", eval__every=every)
        caplog.clear()
        with caplog.at_level("WARNING"):
            cfg_obj = load_config(FlowGRPOConfig, write(cfg, tmp_path / "c.yaml"))
            FlowGRPOTrainer(cfg_obj, cfg["log"]["output_dir"]).setup()
        return [r.getMessage() for r in caplog.records if "eval.suite=shapes" in r.getMessage()]

    (msg,) = warned(str(sd3_dir), 0)
    assert f"model.path {str(sd3_dir)!r} is not a shapes-family model" in msg and "eval.suite=reward" in msg
    assert warned(str(sd3_dir), -1) == []
    assert warned("shapes", 3) == []


def test_two_processes_same_advantages_as_one(sd3_dir, tmp_path):
    """`accelerate launch` with 2 CPU processes: the same prompts, rewards and advantages as one process with the
    same global batch, and the same gradient norm."""
    cfg = tiny_config(sd3_dir, tmp_path / "one", train__max_steps=1)
    cfg["sampling"].update(samples_per_step=8, group_size=4, batch_size=4)
    cfg["objective"]["std_mode"] = "batch"
    cfg["log"].update(save_rollouts=True, sample_every=0)
    assert main(["train", str(write(cfg, tmp_path / "one.yaml"))]) == 0
    cfg["log"]["output_dir"] = str(tmp_path / "two")
    path = write(cfg, tmp_path / "two.yaml")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    # accelerate >= 1.x launches one process for '--cpu --num_processes 2' (several CPU processes need mpirun);
    # its torchrun launcher ('--multi_gpu') with ACCELERATE_USE_CPU starts two CPU processes on the gloo backend
    env["ACCELERATE_USE_CPU"] = "true"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            "--num_processes",
            "2",
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "-m",
            "imgalign",
            "train",
            str(path),
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert '"processes": 2' in res.stderr, "the launch did not start two processes"
    # the main process's lines and summary, once (each process printed them)
    assert res.stderr.count("batch layout:") == 1 and res.stdout.count("done: ") == 1, res.stdout
    one = [json.loads(x) for x in (tmp_path / "one" / "rollouts.jsonl").read_text().splitlines()]
    two = [json.loads(x) for x in (tmp_path / "two" / "rollouts.jsonl").read_text().splitlines()]
    assert len(one) == len(two) == 8
    for x, y in zip(one, two):
        assert x["prompt"] == y["prompt"]
        assert x["rewards"]["red_reward"] == pytest.approx(y["rewards"]["red_reward"], abs=1e-5)
        assert x["advantage"] == pytest.approx(y["advantage"], abs=1e-3)
    assert rows(tmp_path / "two")[0]["perf/nfe"] == 24
    # the update too: the gradient averaged over the two processes is the one process's (its norm, before clipping)
    one_row, two_row = rows(tmp_path / "one")[0], rows(tmp_path / "two")[0]
    assert two_row["train/grad_norm"] == pytest.approx(one_row["train/grad_norm"], rel=1e-4)


def test_a_failing_evaluation_stops_every_process_together():
    """Rank 0's evaluation failing must still reach the collective the other ranks wait at inside evaluate(), and
    they must learn of it: every process then saves a checkpoint (its barriers pair across processes) and stops.
    A main process stopping alone left the others waiting in the next step's gather."""
    from types import SimpleNamespace

    from imgalign.trainers.trainer import FlowGRPOTrainer

    flags: list[float] = []

    def fail(step: int) -> dict[str, float]:
        raise OSError("samples/eval-step-000002.png is a directory")

    def make(is_main: bool, others_failed: float):
        def reduce(t, reduction):
            assert reduction == "sum"
            flags.append(float(t))
            return t + others_failed

        return SimpleNamespace(
            is_main=is_main,
            acc=SimpleNamespace(device=torch.device("cpu"), reduce=reduce),
            _evaluate_main=fail if is_main else (lambda step: {"eval/x": 1.0}),
        )

    with pytest.raises(OSError, match="is a directory"):
        FlowGRPOTrainer.evaluate(make(True, 0.0), 2)
    with pytest.raises(RuntimeError, match="after step 2 failed on the main process"):
        FlowGRPOTrainer.evaluate(make(False, 1.0), 2)
    assert flags == [1.0, 0.0]  # one collective each, the failing main process included
    ok = make(True, 0.0)
    ok._evaluate_main = lambda step: {"eval/x": 1.0}
    assert FlowGRPOTrainer.evaluate(ok, 2) == {"eval/x": 1.0}


def test_default_config_two_steps(tmp_path):
    """`imgalign train --max-steps 2 --output-dir DIR` with the embedded default config (the shapes model)."""
    from imgalign import hub

    try:
        hub.embedded_path("shapes")
    except FileNotFoundError:
        pytest.skip("the embedded shapes model is not in this checkout")
    out = tmp_path / "run"
    assert main(["train", "--max-steps", "2", "--output-dir", str(out), "--set", "eval.every=-1"]) == 0
    assert [x["step"] for x in rows(out)] == [1, 2]
    tags = {k.split("/")[-1] for k in rows(out)[0] if k.startswith("reward_by_tag/geneval/")}
    assert tags and tags <= {"single_object", "two_object", "counting", "colors", "position", "color_attr"}
    from imgalign.pipelines import load_pipeline

    pipe = load_pipeline(out / "checkpoints" / "step-000002")
    assert type(pipe).__name__ == "StableDiffusion3Pipeline"


def test_off_policy_update_warns_once(sd3_dir, tmp_path, caplog):
    """A large lr without warm-up puts the second update far off-policy: one warning naming the fix, and the
    approx_kl that triggered it is in metrics.jsonl."""
    from imgalign.trainers.grpo import OFF_POLICY_KL

    out = tmp_path / "run"
    cfg = tiny_config(sd3_dir, out, train__lr=0.05, train__updates_per_step=2, train__max_steps=3)
    with caplog.at_level("WARNING"):
        assert main(["train", str(write(cfg, tmp_path / "c.yaml"))]) == 0
    kl = [x["policy/approx_kl"] for x in rows(out)]
    assert max(kl) > OFF_POLICY_KL, kl
    assert caplog.text.count("policy/approx_kl = ") == 1
    assert "set train.warmup_steps" in caplog.text


def test_anchor_step_cycles_over_the_untrained_steps():
    from imgalign.trainers.objectives import anchor_step

    assert [anchor_step([0, 1, 2, 3], 10, k) for k in range(7)] == [4, 5, 6, 7, 8, 4, 5]
    assert anchor_step([2], 4, 0) == 0 and anchor_step([2], 4, 1) == 1
    assert anchor_step(list(range(9)), 10, 3) is None


def test_anchor_kl_at_an_untrained_step_matches_the_closed_form(sd3_dir, tmp_path):
    """objective.anchor_beta: the loss gains n·β·KL at one untrained step j, where for the sde kernel
    KL = ‖Δv·dt·(1 + ς²(1 − σ)/(2σ))‖² / (2ς²|dt|) per sample (Δv the policy's velocity minus the base model's at the
    stored state x_j); 0 while the weights equal the base model's."""
    from imgalign.trainers.objectives import TrainContext

    beta = 0.3
    tr, ro, _ = _step0_trainer(
        sd3_dir,
        tmp_path,
        sampling__sde_window=1,
        sampling__sde_window_max_start=0,
        objective__anchor_beta=beta,
    )
    assert ro.train_steps == [0]
    idx, adv, valid = torch.arange(4), torch.tensor([1.0, 0.5, 0.2, -0.1]), torch.ones(4, dtype=torch.bool)
    ctx = TrainContext(tr.adapter, tr.model, 1)  # training step 1: untrained steps [1, 2] -> j = 2
    loss, m = tr.objective.loss(ctx, ro, idx, 0, adv, valid)
    assert m["policy/anchor_kl"] == pytest.approx(0.0, abs=1e-6)
    assert float(loss.detach()) == pytest.approx(-0.4, rel=1e-4)
    _nudge_off_base(tr.model)
    loss, m = tr.objective.loss(ctx, ro, idx, 0, adv, valid)
    j, g = 2, tr.cfg.sampling.guidance_scale
    with torch.no_grad():
        x = ro.latents[:, j]
        dv = tr.adapter.velocity(x, ro.sigmas[j], ro.cond, g, transformer=tr.model)
        with tr.adapter.reference() as ref:
            dv = dv - tr.adapter.velocity(x, ro.sigmas[j], ro.cond, g, transformer=ref)
    kl = _sde_kl(tr, ro, j, dv)
    assert float(kl.mean()) > 1e-3
    assert m["policy/anchor_kl"] == pytest.approx(float(kl.mean()), rel=1e-3)
    policy_only = loss.detach() - beta * kl.mean()
    tr.cfg.objective.anchor_beta = 0.0
    plain = tr.objective.loss(ctx, ro, idx, 0, adv, valid)[0].detach()
    assert float(plain) == pytest.approx(float(policy_only), rel=1e-4)
    # a masked sample (valid False) is in neither the anchor KL nor its metric
    valid = torch.tensor([True, False, True, True])
    kl_valid = float(kl[valid].mean())
    assert abs(kl_valid - float(kl.mean())) > 1e-3 * kl_valid
    plain = float(tr.objective.loss(ctx, ro, idx, 0, adv, valid)[0].detach())
    tr.cfg.objective.anchor_beta = beta
    loss, m = tr.objective.loss(ctx, ro, idx, 0, adv, valid)
    assert m["policy/anchor_kl"] == pytest.approx(kl_valid, rel=1e-3)
    assert float(loss.detach()) - plain == pytest.approx(beta * kl_valid, rel=1e-3)


def test_a_rollouts_train_mask_leaves_its_rows_out_like_valid(sd3_dir, tmp_path):
    """Rollout.train_mask [B, S] (strategies whose rows train only some steps): a row whose mask is False at the
    trained step is out of the GRPO loss exactly as a row with valid False."""
    from imgalign.trainers.objectives import TrainContext

    tr, ro, _ = _step0_trainer(sd3_dir, tmp_path, sampling__sde_window=1, sampling__sde_window_max_start=0)
    idx, adv = torch.arange(4), torch.tensor([1.0, 0.5, 0.2, -0.1])
    ctx = TrainContext(tr.adapter, tr.model, 0)
    valid = torch.tensor([True, False, True, True])
    masked_by_valid = float(tr.objective.loss(ctx, ro, idx, 0, adv, valid)[0].detach())
    assert masked_by_valid == pytest.approx(
        -(1.0 + 0.2 - 0.1) / 3, rel=1e-4
    )  # on-policy: −mean(A) of the rest
    ro.train_mask = torch.ones(4, ro.log_probs.shape[1], dtype=torch.bool)
    ro.train_mask[1, 0] = False
    loss = float(tr.objective.loss(ctx, ro, idx, 0, adv, torch.ones(4, dtype=torch.bool))[0].detach())
    assert loss == pytest.approx(masked_by_valid, rel=1e-6)


def test_vnorm_log_alone_makes_the_objectives_evaluate_the_reference():
    """objective.vnorm_log: true logs the norm inflation without KL or penalty, so the reference forward runs."""
    from imgalign.trainers.config import ObjectiveConfig, SamplingConfig
    from imgalign.trainers.objectives import GRPOObjective, NFTObjective

    for cls in (GRPOObjective, NFTObjective):
        assert not cls(ObjectiveConfig(), SamplingConfig()).needs_reference
        assert cls(ObjectiveConfig(vnorm_log=True), SamplingConfig()).needs_reference


def test_the_anchor_is_carried_by_the_first_trained_step_for_all_of_them(sd3_dir, tmp_path):
    """With n trained steps the trainer averages n terms, so the first one carries n·β·KL_anchor and the others none:
    the update's mean is then β·KL_anchor whatever the window."""
    from imgalign.trainers.objectives import TrainContext

    beta = 0.3
    tr, ro, _ = _step0_trainer(
        sd3_dir,
        tmp_path,
        sampling__sde_window=2,
        sampling__sde_window_max_start=0,
        objective__anchor_beta=beta,
    )
    assert ro.train_steps == [0, 1]
    _nudge_off_base(tr.model)
    idx, adv, valid = torch.arange(4), torch.tensor([1.0, 0.5, 0.2, -0.1]), torch.ones(4, dtype=torch.bool)
    ctx = TrainContext(tr.adapter, tr.model, 0)
    with_anchor = [tr.objective.loss(ctx, ro, idx, term, adv, valid) for term in (0, 1)]
    kl = with_anchor[0][1]["policy/anchor_kl"]
    assert kl > 1e-3 and "policy/anchor_kl" not in with_anchor[1][1]
    tr.cfg.objective.anchor_beta = 0.0
    plain = [float(tr.objective.loss(ctx, ro, idx, term, adv, valid)[0].detach()) for term in (0, 1)]
    assert float(with_anchor[0][0].detach()) - plain[0] == pytest.approx(2 * beta * kl, rel=1e-4)
    assert float(with_anchor[1][0].detach()) == pytest.approx(plain[1], rel=1e-6)


def test_kl_and_anchor_kl_with_noise_block_are_the_block_coordinate_gaussians(sd3_dir, tmp_path):
    """sampling.noise_block=2: the step's Gaussian lives in the block-constant subspace, so the KL to the base (at
    the trained step) and the anchor KL (at an untrained one) are the closed form on the block coordinates Uᵀμ."""
    from imgalign.trainers.objectives import TrainContext

    tr, ro, _ = _step0_trainer(
        sd3_dir,
        tmp_path,
        sampling__noise_block=2,
        sampling__sde_window=1,
        sampling__sde_window_max_start=0,
        objective__kl_beta=0.1,
        objective__anchor_beta=0.1,
    )
    assert ro.train_steps == [0]
    _nudge_off_base(tr.model)
    idx, adv, valid = torch.arange(4), torch.tensor([1.0, 0.5, 0.2, -0.1]), torch.ones(4, dtype=torch.bool)
    _, m = tr.objective.loss(TrainContext(tr.adapter, tr.model, 1), ro, idx, 0, adv, valid)  # anchor j = 2
    g = tr.cfg.sampling.guidance_scale
    for j, key in ((0, "policy/kl"), (2, "policy/anchor_kl")):
        with torch.no_grad():
            x = ro.latents[:, j]
            dv = tr.adapter.velocity(x, ro.sigmas[j], ro.cond, g, transformer=tr.model)
            with tr.adapter.reference() as ref:
                dv = dv - tr.adapter.velocity(x, ro.sigmas[j], ro.cond, g, transformer=ref)
        kl = _sde_kl(tr, ro, j, dv, block=2)
        assert float(kl.mean()) > 1e-4
        assert float(kl.mean()) < 0.9 * float(_sde_kl(tr, ro, j, dv).mean())  # the subspace holds less of it
        assert m[key] == pytest.approx(float(kl.mean()), rel=1e-3), key


def test_kl_and_anchor_kl_follow_logprob_reduce(sd3_dir, tmp_path):
    """objective.logprob_reduce=mean: the KL to the base and the anchor KL are reduced like the log-density, the
    sum over the D latent elements divided by D (so β means the same thing for both)."""
    from imgalign.trainers.objectives import TrainContext

    tr, ro, _ = _step0_trainer(
        sd3_dir,
        tmp_path,
        sampling__sde_window=1,
        sampling__sde_window_max_start=0,
        objective__kl_beta=0.1,
        objective__anchor_beta=0.1,
    )
    _nudge_off_base(tr.model)
    idx, adv, valid = torch.arange(4), torch.tensor([1.0, 0.5, 0.2, -0.1]), torch.ones(4, dtype=torch.bool)
    m = {}
    for reduce in ("sum", "mean"):
        tr.cfg.objective.logprob_reduce = reduce
        m[reduce] = tr.objective.loss(TrainContext(tr.adapter, tr.model, 1), ro, idx, 0, adv, valid)[1]
    d = ro.latents[0, 0].numel()
    for key in ("policy/kl", "policy/anchor_kl"):
        assert m["sum"][key] > 1e-4, key
        assert m["mean"][key] == pytest.approx(m["sum"][key] / d, rel=1e-4), key


def _nudge_off_base(model: torch.nn.Module) -> None:
    """Add N(0, 0.02²) noise to every weight (torch's global RNG): the policy leaves the base, so its KL is not 0."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))


def _inflate_velocity(model: torch.nn.Module, factor: float) -> None:
    """Scale the SD3 transformer's output layer (weight and bias) by `factor`: the policy's velocity is then exactly
    factor·v_ref (CFG mixes linearly), so ‖v_θ‖/‖v_ref‖ = factor for every sample and the policy is off the base."""
    with torch.no_grad():
        model.proj_out.weight.mul_(factor)
        model.proj_out.bias.mul_(factor)


def test_grpo_loss_adds_kl_beta_times_the_kl_and_penalty_weight_times_the_hinge(sd3_dir, tmp_path):
    """Off the base (v_θ = 1.5·v_ref), the flat GRPO loss is the surrogate + β·KL + λ·hinge, each the mean over the
    valid samples: the KL hand-computed in closed form for the sde kernel, the hinge max(0, 1.5 − 1) = 0.5. At
    initialisation both are 0, so a trainer run cannot tell whether the loss carries them."""
    from imgalign.trainers.objectives import TrainContext

    beta, lam = 0.3, 0.2
    tr, ro, _ = _step0_trainer(
        sd3_dir,
        tmp_path,
        sampling__sde_window=1,
        sampling__sde_window_max_start=0,
        objective__kl_beta=beta,
        objective__penalty="vnorm",
        objective__penalty_weight=lam,
    )
    assert ro.train_steps == [0]
    _inflate_velocity(tr.model, 1.5)
    idx, adv = torch.arange(4), torch.tensor([1.0, 0.5, 0.2, -0.1])
    valid = torch.tensor([True, False, True, True])  # the masked sample is in neither mean
    ctx = TrainContext(tr.adapter, tr.model, 0)
    o = tr.cfg.objective

    def loss_with(kl_beta: float, penalty_weight: float) -> float:
        o.kl_beta, o.penalty_weight = kl_beta, penalty_weight
        return float(tr.objective.loss(ctx, ro, idx, 0, adv, valid)[0].detach())

    i, g = 0, tr.cfg.sampling.guidance_scale
    with torch.no_grad():
        x = ro.latents[:, i]
        v = tr.adapter.velocity(x, ro.sigmas[i], ro.cond, g, transformer=tr.model)
        with tr.adapter.reference() as ref:
            v_ref = tr.adapter.velocity(x, ro.sigmas[i], ro.cond, g, transformer=ref)
    torch.testing.assert_close(v, 1.5 * v_ref, rtol=1e-4, atol=1e-5)
    kl = _sde_kl(tr, ro, i, v - v_ref)  # [4]
    kl_valid = float(kl[valid].mean())
    assert kl_valid > 1e-3 and abs(kl_valid - float(kl.mean())) > 1e-3 * kl_valid  # the mask matters

    plain = loss_with(0.0, 0.0)
    assert loss_with(beta, 0.0) - plain == pytest.approx(beta * kl_valid, rel=1e-3)
    assert tr.objective.loss(ctx, ro, idx, 0, adv, valid)[1]["policy/kl"] == pytest.approx(kl_valid, rel=1e-3)
    assert loss_with(0.0, lam) - plain == pytest.approx(lam * 0.5, rel=1e-4)
    assert loss_with(beta, lam) - plain == pytest.approx(beta * kl_valid + lam * 0.5, rel=1e-3)


def test_masked_mean_leaves_out_zero_weight_rows_even_when_they_are_not_finite():
    """_masked_mean: a row of weight 0 is out of the mean also when it is NaN or inf (NaN·0 is NaN); no weight at
    all gives 0, not NaN."""
    from imgalign.trainers.objectives import _masked_mean

    x = torch.tensor([1.0, float("nan"), 3.0, float("inf")])
    assert float(_masked_mean(x, torch.tensor([1.0, 0.0, 1.0, 0.0]))) == 2.0
    assert float(_masked_mean(x, torch.zeros(4))) == 0.0


def test_add_penalty_is_a_mean_over_the_valid_rows_and_its_gradient_reaches_v_theta_only():
    """add_penalty with the linear hinge: λ·mean over the valid rows of max(0, ‖v_θ‖/‖v_ref‖ − 1), hand-computed
    (ratios 2, 1.5 and 4, the last row masked); the gradient reaches v_θ as λ/n_valid · v/(‖v‖·‖v_ref‖) on a valid
    row above the hinge and 0 on a masked one, never v_ref; the logged ratio and penalty are the valid rows' means."""
    from imgalign.trainers.config import ObjectiveConfig
    from imgalign.trainers.objectives import add_penalty

    v_ref = torch.tensor([[3.0, 4.0], [0.0, 2.0], [1.0, 0.0]], requires_grad=True)  # norms 5, 2, 1
    v = torch.tensor([[6.0, 8.0], [0.0, 3.0], [4.0, 0.0]], requires_grad=True)  # norms 10, 3, 4
    w = torch.tensor([1.0, 1.0, 0.0])
    m: dict = {}
    cfg = ObjectiveConfig(penalty="vnorm", penalty_weight=0.5)
    loss = add_penalty(cfg, torch.zeros(()), v, v_ref, w, m)
    assert float(loss.detach()) == pytest.approx(0.5 * (1.0 + 0.5) / 2)
    assert m["policy/vnorm_ratio"] == pytest.approx(1.75) and m["policy/penalty"] == pytest.approx(0.75)
    loss.backward()
    torch.testing.assert_close(v.grad, 0.25 * torch.tensor([[0.12, 0.16], [0.0, 0.5], [0.0, 0.0]]))
    assert v_ref.grad is None
    # the per-bucket ratios are the valid rows' too (the masked row's 4 was in them)
    m = {}
    add_penalty(cfg, torch.zeros(()), v, v_ref, w, m, buckets=["early", "late", "late"])
    assert m["vnorm/norm_ratio/early"] == 2.0 and m["vnorm/norm_ratio/late"] == 1.5
    assert m["vnorm/norm_ratio/all"] == pytest.approx(m["policy/vnorm_ratio"])


def test_a_plugin_penalty_that_does_not_reduce_to_one_value_per_sample_is_named(monkeypatch):
    """A velocity penalty returning [b, C] (not reduced) was a size-mismatch traceback in the masked mean; it is
    named with the shape it must return. One value per sample (or one for all) trains."""
    import sys
    import types

    from imgalign.trainers.config import ObjectiveConfig
    from imgalign.trainers.objectives import add_penalty

    mod = types.ModuleType("my_lab_pen")
    mod.elementwise = lambda v, v_ref: (v - v_ref) ** 2
    mod.per_sample = lambda v, v_ref: ((v - v_ref) ** 2).sum(1)
    monkeypatch.setitem(sys.modules, "my_lab_pen", mod)
    v, v_ref, w = torch.ones(3, 2), torch.zeros(3, 2), torch.ones(3)
    cfg = ObjectiveConfig(penalty="my_lab_pen:elementwise", penalty_weight=1.0)
    with pytest.raises(
        ValueError, match=r"penalty 'my_lab_pen:elementwise' returned \(3, 2\) for 3 samples.*\[b\]"
    ):
        add_penalty(cfg, torch.zeros(()), v, v_ref, w, {})
    cfg = ObjectiveConfig(penalty="my_lab_pen:per_sample", penalty_weight=1.0)
    assert float(add_penalty(cfg, torch.zeros(()), v, v_ref, w, {})) == 2.0


def test_a_plugin_penalty_without_a_graph_is_named(monkeypatch):
    """A velocity penalty returning a constant (here NaN) or a detached value added nothing to the gradient: the run
    trained unpenalised and logged policy/penalty=nan. It is named; one computed from v_theta trains."""
    import sys
    import types

    from imgalign.trainers.config import ObjectiveConfig
    from imgalign.trainers.objectives import add_penalty

    mod = types.ModuleType("my_lab_pen2")
    mod.constant = lambda v, v_ref: torch.full((v.shape[0],), float("nan"))
    mod.detached = lambda v, v_ref: v.detach().pow(2).sum(1)
    mod.fine = lambda v, v_ref: v.pow(2).sum(1)
    monkeypatch.setitem(sys.modules, "my_lab_pen2", mod)
    v, v_ref, w = torch.ones(3, 2, requires_grad=True), torch.zeros(3, 2), torch.ones(3)
    for attr in ("constant", "detached"):
        cfg = ObjectiveConfig(penalty=f"my_lab_pen2:{attr}", penalty_weight=1.0)
        with pytest.raises(
            ValueError, match=rf"penalty 'my_lab_pen2:{attr}' returned a tensor without a graph"
        ):
            add_penalty(cfg, torch.zeros(()), v, v_ref, w, {})
    cfg = ObjectiveConfig(penalty="my_lab_pen2:fine", penalty_weight=1.0)
    loss = add_penalty(cfg, torch.zeros(()), v, v_ref, w, {})
    loss.backward()
    torch.testing.assert_close(v.grad, torch.full((3, 2), 2.0 / 3))


def test_a_plugin_rollout_returning_no_rollout_is_named(sd3_dir, tmp_path, monkeypatch, capsys):
    """A rollout strategy of the right signature returning None (or a batch of another size) was an AttributeError
    traceback in the divergence mask; the step stops with one error naming sampling.rollout and the contract."""
    import sys
    import types

    from imgalign.trainers.rollout import flat_rollout

    mod = types.ModuleType("my_lab_rollout")
    mod.nothing = lambda ctx, prompts, metadata, sample_ids, group_ids: None

    def short(ctx, prompts, metadata, sample_ids, group_ids):
        ro = flat_rollout(ctx, prompts, metadata, sample_ids, group_ids)
        ro.images = ro.images[:1]
        return ro

    mod.short = short
    monkeypatch.setitem(sys.modules, "my_lab_rollout", mod)
    for name, msg in (
        ("nothing", "sampling.rollout 'my_lab_rollout:nothing' returned a NoneType, not a Rollout"),
        (
            "short",
            "sampling.rollout 'my_lab_rollout:short' returned images (1, 3, 8, 8) and 4 prompts for 4 ",
        ),
    ):
        cfg = tiny_config(sd3_dir, tmp_path / name, train__max_steps=1)
        cfg["sampling"]["rollout"] = f"my_lab_rollout:{name}"
        assert main(["train", str(write(cfg, tmp_path / f"{name}.yaml"))]) != 0
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err, err


def test_grpo_terms_are_the_trained_steps_and_every_base_model_term_needs_the_reference():
    """terms(): a flat rollout's trained steps as they are (a window need not start at 0), one term for a tree; the
    reference forward runs for the KL, the velocity penalty, its log alone, and the anchor (a full fine-tune keeps a
    frozen copy only when asked)."""
    from types import SimpleNamespace

    from imgalign.trainers.config import ObjectiveConfig, SamplingConfig
    from imgalign.trainers.objectives import GRPOObjective

    obj = GRPOObjective(ObjectiveConfig(), SamplingConfig())
    assert obj.terms(SimpleNamespace(extras={}, train_steps=[2, 3])) == [2, 3]
    assert obj.terms(SimpleNamespace(extras={"tree": None}, train_steps=[2, 3])) == [0]
    for over in ({"kl_beta": 0.1}, {"penalty": "vnorm", "penalty_weight": 0.1}, {"anchor_beta": 0.1}):
        assert GRPOObjective(ObjectiveConfig(**over), SamplingConfig()).needs_reference, over


def test_grpo_trains_the_guided_velocity_it_sampled_with(sd3_dir, tmp_path):
    """sampling.guidance_scale 3: the training forward, the KL's reference forward and the anchor's two forwards all
    use the rollout's CFG, so at initialisation every trained step is on-policy (ratio 1, loss −mean(A)) with KL and
    anchor KL 0; step 1 of 4 logs its norm ratio in the early bucket."""
    from imgalign.trainers.objectives import TrainContext

    tr, ro, _ = _step0_trainer(
        sd3_dir,
        tmp_path,
        sampling__guidance_scale=3.0,
        sampling__sde_window=2,
        sampling__sde_window_max_start=0,
        objective__kl_beta=0.1,
        objective__anchor_beta=0.1,
    )
    assert ro.train_steps == [0, 1]
    idx, adv, valid = torch.arange(4), torch.tensor([1.0, 0.5, 0.2, -0.1]), torch.ones(4, dtype=torch.bool)
    ctx = TrainContext(tr.adapter, tr.model, 0)  # untrained steps [2]: the anchor is at step 2
    ms = []
    for term in (0, 1):
        loss, m = tr.objective.loss(ctx, ro, idx, term, adv, valid)
        assert float(loss.detach()) == pytest.approx(-0.4, rel=1e-4), term
        assert m["policy/ratio_min"] == pytest.approx(1.0, abs=1e-4)
        assert m["policy/ratio_max"] == pytest.approx(1.0, abs=1e-4)
        assert m["policy/kl"] == pytest.approx(0.0, abs=1e-6)
        ms.append(m)
    assert ms[0]["policy/anchor_kl"] == pytest.approx(0.0, abs=1e-6)
    assert "vnorm/norm_ratio/early" in ms[1] and "vnorm/norm_ratio/middle" not in ms[1]  # step_bucket(1, 4)


def test_grpo_logs_each_trained_steps_norm_ratio_in_that_steps_own_bucket(sd3_dir, tmp_path):
    """objective.vnorm_log: the norm ratio of trained step i of 4 goes to step_bucket(i, 4), so steps 0 and 1 log
    early and step 2 middle (on the step itself, not the schedule's first step)."""
    from imgalign.trainers.objectives import TrainContext

    tr, ro, _ = _step0_trainer(sd3_dir, tmp_path, sampling__sde_window=3, objective__vnorm_log=True)
    assert ro.train_steps == [0, 1, 2]
    idx, adv, valid = torch.arange(4), torch.tensor([1.0, 0.5, 0.2, -0.1]), torch.ones(4, dtype=torch.bool)
    ctx = TrainContext(tr.adapter, tr.model, 0)
    buckets = []
    for term in (0, 1, 2):
        m = tr.objective.loss(ctx, ro, idx, term, adv, valid)[1]
        buckets.append(sorted(k for k in m if k.startswith("vnorm/norm_ratio/") and not k.endswith("/all")))
    assert buckets == [["vnorm/norm_ratio/early"]] * 2 + [["vnorm/norm_ratio/middle"]]


@pytest.mark.parametrize(
    "over", [{"objective__logprob_reduce": "mean"}, {"sampling__noise_block": 2}], ids=["mean", "block"]
)
def test_the_training_step_evaluates_the_density_the_rollout_stored(sd3_dir, tmp_path, over):
    """objective.logprob_reduce=mean and sampling.noise_block=2 change the step's log-density; the training forward
    evaluates it as the rollout did, so on-policy the ratio is 1 and the loss −mean(A)."""
    from imgalign.trainers.objectives import TrainContext

    tr, ro, _ = _step0_trainer(
        sd3_dir, tmp_path, sampling__sde_window=1, sampling__sde_window_max_start=0, **over
    )
    idx, adv, valid = torch.arange(4), torch.tensor([1.0, 0.5, 0.2, -0.1]), torch.ones(4, dtype=torch.bool)
    loss, m = tr.objective.loss(TrainContext(tr.adapter, tr.model, 0), ro, idx, 0, adv, valid)
    assert m["policy/ratio_min"] == pytest.approx(1.0, abs=1e-4)
    assert m["policy/ratio_max"] == pytest.approx(1.0, abs=1e-4)
    assert float(loss.detach()) == pytest.approx(-0.4, rel=1e-4)


def test_grpo_metrics_and_penalty_are_means_over_the_valid_rows(sd3_dir, tmp_path):
    """Rows 1 and 2 masked (valid False), their stored log-densities moved by ±5 (ratios e^∓5 were they counted):
    ratio mean/min/max stay 1 and the log-density is the valid rows' mean. Off the base by a different factor per
    row, the logged norm ratio, the hinge and the loss's λ·hinge are the valid rows' means, hand-computed."""
    from imgalign.trainers.objectives import TrainContext

    lam = 0.2
    tr, ro, _ = _step0_trainer(
        sd3_dir,
        tmp_path,
        sampling__sde_window=1,
        sampling__sde_window_max_start=0,
        objective__penalty="vnorm",
        objective__penalty_weight=lam,
    )
    assert ro.train_steps == [0]
    idx, adv = torch.arange(4), torch.tensor([1.0, 0.5, 0.2, -0.1])
    valid = torch.tensor([True, False, False, True])
    ctx = TrainContext(tr.adapter, tr.model, 0)
    ro.log_probs[1, 0] += 5.0
    ro.log_probs[2, 0] -= 5.0
    loss, m = tr.objective.loss(ctx, ro, idx, 0, adv, valid)
    assert float(loss.detach()) == pytest.approx(-(1.0 - 0.1) / 2, rel=1e-4)
    for key in ("policy/ratio_mean", "policy/ratio_min", "policy/ratio_max"):
        assert m[key] == pytest.approx(1.0, abs=1e-4), key
    assert m["policy/logprob"] == pytest.approx(float(ro.log_probs[[0, 3], 0].mean()), rel=1e-5)

    torch.manual_seed(0)
    _inflate_velocity(tr.model, 1.5)
    with torch.no_grad():
        for p in tr.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    i, g = 0, tr.cfg.sampling.guidance_scale
    with torch.no_grad():
        x = ro.latents[:, i]
        v = tr.adapter.velocity(x, ro.sigmas[i], ro.cond, g, transformer=tr.model)
        with tr.adapter.reference() as ref:
            v_ref = tr.adapter.velocity(x, ro.sigmas[i], ro.cond, g, transformer=ref)
    ratio = v.flatten(1).norm(dim=1) / v_ref.flatten(1).norm(dim=1)  # [4]
    hinge = (ratio - 1).clamp_min(0)
    assert float(hinge.min()) > 0 and float((hinge[valid].mean() - hinge.mean()).abs()) > 1e-3
    out = []
    for weight in (lam, 0.0):
        tr.cfg.objective.penalty_weight = weight
        tr.model.zero_grad()
        loss, m = tr.objective.loss(ctx, ro, idx, 0, adv, valid)
        loss.backward()
        out.append((float(loss.detach()), m, torch.cat([p.grad.flatten() for p in tr.params])))
    (with_pen, m, g_pen), (plain, _, g_plain) = out
    assert m["policy/vnorm_ratio"] == pytest.approx(float(ratio[valid].mean()), rel=1e-4)
    assert m["policy/penalty"] == pytest.approx(float(hinge[valid].mean()), rel=1e-3)
    assert with_pen - plain == pytest.approx(lam * float(hinge[valid].mean()), rel=1e-3)
    # the hinge's gradient reaches the weights
    assert float((g_pen - g_plain).norm()) > 1e-3 * float(g_plain.norm())


def _nft_vnorm_trainer(sd3_dir: Path, tmp_path: Path, lam: float):  # noqa: ANN202 - FlowGRPOTrainer
    """A set-up trainer of the tiny config with objective.name=nft and the vnorm penalty at weight `lam`."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import FlowGRPOTrainer

    cfg_d = tiny_config(
        sd3_dir,
        tmp_path / "run",
        objective__name="nft",
        objective__penalty="vnorm",
        objective__penalty_weight=lam,
    )
    tr = FlowGRPOTrainer(load_config(FlowGRPOConfig, write(cfg_d, tmp_path / "c.yaml")), tmp_path / "run")
    tr.setup()
    return tr


def test_nft_loss_adds_penalty_weight_times_the_hinge(sd3_dir, tmp_path):
    """Off the base (v_θ = 1.5·v_ref at every noisy latent), the NFT loss gains λ·max(0, 1.5 − 1) = λ·0.5 from the
    velocity-norm hinge; at initialisation the hinge is 0."""
    from imgalign.trainers.objectives import NFTObjective, TrainContext
    from imgalign.trainers.testing import first_rollout

    lam = 0.2
    tr = _nft_vnorm_trainer(sd3_dir, tmp_path, lam)
    assert isinstance(tr.objective, NFTObjective)
    ro, _ = first_rollout(tr)
    _inflate_velocity(tr.model, 1.5)
    idx, adv = torch.arange(4), torch.tensor([1.0, 0.5, 0.2, -0.1])
    valid = torch.tensor([True, False, True, True])
    ctx = TrainContext(tr.adapter, tr.model, 0)

    def loss_with(penalty_weight: float) -> tuple[float, dict]:
        tr.cfg.objective.penalty_weight = penalty_weight
        loss, m = tr.objective.loss(ctx, ro, idx, 0, adv, valid)
        return float(loss.detach()), m

    plain, m = loss_with(0.0)
    assert m["policy/vnorm_ratio"] == pytest.approx(1.5, rel=1e-4)
    with_pen, m = loss_with(lam)
    assert m["policy/penalty"] == pytest.approx(0.5, rel=1e-4)
    assert with_pen - plain == pytest.approx(lam * 0.5, rel=1e-4)


def _row_index_penalty(v: torch.Tensor, v_ref: torch.Tensor) -> torch.Tensor:
    """A penalty that is each row's position in the micro-batch (0, 1, 2, ...), still a function of v_θ."""
    return torch.arange(v.shape[0], dtype=v.dtype, device=v.device) + 0 * v.flatten(1).sum(1)


def test_nft_penalty_is_a_mean_over_the_valid_samples(sd3_dir, tmp_path, monkeypatch):
    """With sample 1 of 4 invalid, a penalty equal to each row's index adds λ·(0 + 2 + 3)/3 to the NFT loss: a mean
    over the valid samples, as every other term of the loss (not λ·1.5 over all four)."""
    from imgalign.trainers.objectives import TrainContext
    from imgalign.trainers.registry import PENALTIES
    from imgalign.trainers.testing import first_rollout

    monkeypatch.setitem(PENALTIES._items, "row_index", _row_index_penalty)
    lam = 0.2
    tr = _nft_vnorm_trainer(sd3_dir, tmp_path, lam)
    tr.cfg.objective.penalty = "row_index"
    ro, _ = first_rollout(tr)
    idx, adv = torch.arange(4), torch.tensor([1.0, 0.5, 0.2, -0.1])
    valid = torch.tensor([True, False, True, True])
    ctx = TrainContext(tr.adapter, tr.model, 0)
    out = []
    for weight in (lam, 0.0):
        tr.cfg.objective.penalty_weight = weight
        loss, m = tr.objective.loss(ctx, ro, idx, 0, adv, valid)
        out.append((float(loss.detach()), m))
    (with_pen, m), (plain, _) = out
    assert m["policy/penalty"] == pytest.approx(5 / 3)
    assert with_pen - plain == pytest.approx(lam * 5 / 3, rel=1e-4)


def test_reward_means_by_tag_hand_computed():
    from imgalign.trainers.rewarding import reward_means_by_tag

    scores = torch.tensor([[1.0, 0.0, float("nan"), 0.5, 2.0], [0.2, 0.4, 0.6, 0.8, 1.0]])  # [K=2, N=5]
    finite = torch.isfinite(scores)
    meta = [{"tag": "counting"}, {"tag": "counting"}, {"tag": "counting"}, {"tag": "colors"}, {}]
    m = reward_means_by_tag(scores, finite, ["geneval", "clip"], meta)
    assert m == pytest.approx(
        {
            "reward_by_tag/geneval/counting": 0.5,  # (1 + 0) / 2: the NaN is left out
            "reward_by_tag/geneval/colors": 0.5,
            "reward_by_tag/clip/counting": 0.4,  # (0.2 + 0.4 + 0.6) / 3
            "reward_by_tag/clip/colors": 0.8,
        }
    )
    assert reward_means_by_tag(scores, finite, ["geneval", "clip"], [{}] * 5) == {}


def test_reward_stats_hand_computed():
    from imgalign.trainers.rewarding import reward_stats

    scores = torch.tensor(
        [[1.0, 0.0, float("nan"), 0.5], [float("inf"), float("nan"), float("nan"), float("nan")]]
    )
    finite = torch.isfinite(scores)  # [K=2, N=4]
    m = reward_stats(scores, finite, ["geneval", "clip"])
    assert m["reward/geneval/mean"] == pytest.approx(0.5)  # (1 + 0 + 0.5) / 3: the NaN is left out
    assert m["reward/geneval/std"] == pytest.approx((1 / 6) ** 0.5)  # population std of (1, 0, 0.5)
    assert m["reward/geneval/nonfinite"] == 1.0
    assert math.isnan(m["reward/clip/mean"]) and math.isnan(m["reward/clip/std"])  # nothing finite to average
    assert m["reward/clip/nonfinite"] == 4.0


def test_score_all_warns_by_reward_name_except_on_known_bad_rows(caplog):
    """score_all keeps a non-finite score in place and warns naming the reward and the prompt, except on rows the
    caller already knows are bad (diverged samples, warned about once already)."""
    from imgalign.rewards.base import RewardOutput
    from imgalign.trainers.rewarding import score_all

    def half_nan(images, prompts, metadata):
        return RewardOutput(torch.tensor([1.0, float("nan"), float("nan")]))

    images, prompts = torch.zeros(3, 3, 4, 4), ["a", "b", "c"]
    with caplog.at_level("WARNING", logger="imgalign.trainers.rewarding"):
        s = score_all({"judge": half_nan}, images, prompts, [{}] * 3, torch.tensor([False, True, True]))
    assert s.shape == (1, 3) and s[0, 0] == 1 and s[0, 1:].isnan().all()
    assert "non-finite" not in caplog.text
    with caplog.at_level("WARNING", logger="imgalign.trainers.rewarding"):
        score_all({"judge": half_nan}, images, prompts, [{}] * 3, torch.tensor([False, True, False]))
    assert "'judge' returned 1 non-finite score(s)" in caplog.text and "['c']" in caplog.text


def test_score_all_stacks_one_row_per_reward_in_order():
    """[K, B]: row k holds reward k's scores of the B images, in the order of the rewards dict."""
    from imgalign.rewards.base import RewardOutput
    from imgalign.trainers.rewarding import score_all

    def const(v):
        return lambda images, prompts, metadata: RewardOutput(torch.arange(3.0) + v)

    s = score_all({"a": const(0.0), "b": const(10.0)}, torch.zeros(3, 3, 4, 4), ["x", "y", "z"], [{}] * 3)
    assert s.tolist() == [[0.0, 1.0, 2.0], [10.0, 11.0, 12.0]] and s.dtype == torch.float32


def test_a_unique_reward_name_equal_to_another_rewards_key_names_every_reward_by_its_key():
    """geneval:mode=strict and geneval share the name geneval (so both take their keys), and a third reward is
    named geneval:mode_strict: names would collide, so every reward is named by its key."""
    from imgalign.trainers.rewarding import metric_names

    specs = ["geneval:mode=strict", "geneval", "my.mod:strict_judge"]
    out = metric_names(specs, ["geneval", "geneval", "geneval:mode_strict"])
    assert out == ["geneval:mode_strict", "geneval", "my.mod:strict_judge"]


def test_rewards_sharing_a_name_are_named_by_their_spec_in_any_order():
    """A reward's metric name is its name when no other reward of the run has it; rewards sharing one are named by
    their canonical spec, whatever their order (geneval_2 was strict or partial by position), in characters every
    tracker takes (MLflow refuses '=' and ',' in metric names)."""
    import re

    from imgalign.trainers.rewarding import build_rewards, metric_names

    running = "imgalign.trainers.testing:RunningMeanReward"
    names = ["geneval:mode=strict", "geneval", running]
    assert list(build_rewards(names)) == ["geneval:mode_strict", "geneval", "running_mean"]
    assert list(build_rewards(names[::-1])) == ["running_mean", "geneval", "geneval:mode_strict"]
    specs = ["clip:model=a,weight=2", "clip:model=a/b", "clip:model=a_b"]
    out = metric_names(specs, ["clip"] * 3)
    assert out == ["clip:model_a_weight_2", "clip:model_a_b", "clip:model_a_b_2"]
    assert all(re.fullmatch(r"[\w.\- :]+", n) for n in out)
    assert list(build_rewards(["geneval", "imgalign.trainers.testing:red_reward"])) == [
        "geneval",
        "red_reward",
    ]
    with pytest.raises(ValueError, match="'geneval' and 'geneval:mode=partial' are the same reward"):
        build_rewards(["geneval", "geneval:mode=partial"])


def test_a_shapes_model_folder_keeps_its_trained_context_length(sd3_dir, tmp_path):
    """A folder of the shapes architecture (a fine-tuned checkpoint, a model from `imgalign world pretrain`) trains
    with the one zero 'T5' token the shapes model was trained with, as `imgalign eval` samples it; with the
    pipeline's default (256) its samples are noise (measured: in-loop suite 0.025 against 0.40). Other models keep
    their pipeline's default."""
    import shutil

    from imgalign import hub
    from imgalign.config import load_config
    from imgalign.eval.models import shapes_max_sequence_length
    from imgalign.sampling import MAX_SEQUENCE_LENGTH
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import FlowGRPOTrainer

    try:
        shipped = hub.embedded_path("shapes")
    except FileNotFoundError:
        pytest.skip("the embedded shapes model is not in this checkout")
    folder = tmp_path / "my-shapes-model"
    shutil.copytree(shipped, folder)
    assert shapes_max_sequence_length("shapes") == MAX_SEQUENCE_LENGTH
    assert shapes_max_sequence_length(str(folder)) == MAX_SEQUENCE_LENGTH
    assert shapes_max_sequence_length(str(sd3_dir)) is None
    cfg_d = tiny_config(folder, tmp_path / "run")
    tr = FlowGRPOTrainer(load_config(FlowGRPOConfig, write(cfg_d, tmp_path / "c.yaml")), tmp_path / "run")
    tr.setup()
    assert tr.adapter.max_sequence_length == MAX_SEQUENCE_LENGTH


def _fake_checkpoint(run: Path, step: int) -> Path:
    d = run / "checkpoints" / f"step-{step:06d}"
    (d / "trainer_state").mkdir(parents=True)
    (d / "trainer_state" / "state.json").write_text(json.dumps({"step": step}))
    return d


def test_prune_keeps_the_last_n_and_sets_aside_a_branch_left_by_an_earlier_run(tmp_path):
    """keep_last counts by step; checkpoints later than the one just written (left by an earlier run of the folder
    that this run resumed before) are renamed superseded-…, so --resume auto continues this run."""
    from imgalign.trainers import checkpoint as C

    for step in (10, 20, 40):
        _fake_checkpoint(tmp_path, step)
    C.prune(tmp_path, 2, newest=tmp_path / "checkpoints" / "step-000040")
    assert [p.name for p in C.list_checkpoints(tmp_path)] == ["step-000020", "step-000040"]
    # resumed from step 20 and saved step 30: step 40 belongs to the abandoned run
    new = _fake_checkpoint(tmp_path, 30)
    C.prune(tmp_path, 1, newest=new)
    assert [p.name for p in C.list_checkpoints(tmp_path)] == ["step-000030"]
    assert C.latest_checkpoint(tmp_path) == new
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step-000030", "superseded-step-000040"]  # nothing half-deleted is left


def test_a_step_superseded_again_gets_the_next_free_name(tmp_path, monkeypatch):
    """A branch set aside twice before (superseded-step-N, superseded-step-N-1) is kept under the next free name,
    superseded-step-N-2, never over an earlier copy."""
    from imgalign.trainers import checkpoint as C

    root = tmp_path / "checkpoints"
    _fake_checkpoint(tmp_path, 10)
    for name in ("superseded-step-000040", "superseded-step-000040-1"):
        _fake_checkpoint(tmp_path, 40).rename(root / name)
    _fake_checkpoint(tmp_path, 40)
    exists, calls = Path.exists, []

    # a counter that stops moving fails here instead of looping forever
    def bounded_exists(self, *args, **kwargs):
        calls.append(self)
        assert len(calls) < 100, f"Path.exists asked 100 times, last of {self}"
        return exists(self, *args, **kwargs)

    monkeypatch.setattr(Path, "exists", bounded_exists)
    assert C.supersede_after(tmp_path, 10) == [root / "superseded-step-000040-2"]
    monkeypatch.undo()
    assert [p.name for p in C.list_checkpoints(tmp_path)] == ["step-000010"]


def test_latest_checkpoint_is_the_newest_complete_step(tmp_path):
    """--resume auto continues from the newest checkpoint, by step number (step-1000000 sorts before step-999999 as
    text), not from the oldest or the last listed."""
    from imgalign.trainers import checkpoint as C

    assert C.latest_checkpoint(tmp_path) is None
    for step in (10, 1_000_000, 3, 999_999):
        _fake_checkpoint(tmp_path, step)
    assert C.latest_checkpoint(tmp_path) == tmp_path / "checkpoints" / "step-1000000"


@pytest.mark.parametrize(
    ("max_steps", "every"), [(1, 0), (3, 1)], ids=["the final evaluation", "an evaluation every N steps"]
)
def test_a_failing_evaluation_saves_the_checkpoint_and_stops(
    sd3_dir, tmp_path, monkeypatch, max_steps, every
):
    from imgalign.trainers.trainer import FlowGRPOTrainer

    def broken(self, step):
        raise RuntimeError("the evaluation broke")

    monkeypatch.setattr(FlowGRPOTrainer, "evaluate", broken)
    out = tmp_path / "run"
    cfg = tiny_config(sd3_dir, out, train__max_steps=max_steps)
    cfg["eval"] = {"every": every, "at_start": False}
    with pytest.raises(RuntimeError, match="the evaluation broke"):
        main(["train", str(write(cfg, tmp_path / "c.yaml"))])
    assert (out / "checkpoints" / "step-000001" / "trainer_state" / "state.json").is_file()
    assert len(rows(out)) == 1


def test_adv_clip_zero_means_no_clip():
    from imgalign.trainers.grpo import group_advantages

    r = torch.tensor([0.0, 0.0, 0.0, 1.0])
    a = group_advantages(r, torch.zeros(4, dtype=torch.long), "group", 0.0).advantages
    torch.testing.assert_close(
        a, group_advantages(r, torch.zeros(4, dtype=torch.long), "group", None).advantages
    )
    assert float(a.abs().max()) > 1


def test_prune_removes_what_a_killed_save_or_prune_left(tmp_path):
    """A kill during pruning left .trash-step-N (a whole checkpoint's size) and one during a save .tmp-step-N; both
    go at the next prune. step-N.old is removed once step-N is complete, and put back when it is the only copy."""
    from imgalign.trainers import checkpoint as C

    root = tmp_path / "checkpoints"
    for step in (1, 2, 3):
        _fake_checkpoint(tmp_path, step)
    os.replace(root / "step-000001", root / ".trash-step-000001")
    _fake_checkpoint(tmp_path, 4).rename(root / ".tmp-step-000004")
    (root / "step-000002").rename(root / "step-000002.old")  # killed between the two renames of a re-save
    shutil.copytree(root / "step-000003", root / "step-000003.old")
    C.prune(tmp_path, 5, newest=root / "step-000003")
    assert sorted(p.name for p in root.iterdir()) == ["step-000002", "step-000003"]


def test_a_checkpoint_folder_without_state_json_is_not_listed(tmp_path):
    """state.json is written last: a step folder without it is incomplete and never resumed from."""
    from imgalign.trainers import checkpoint as C

    done = _fake_checkpoint(tmp_path, 10)
    partial = tmp_path / "checkpoints" / "step-000020" / "trainer_state"
    partial.mkdir(parents=True)
    (partial / "trainable.safetensors").write_bytes(b"")
    assert C.list_checkpoints(tmp_path) == [done]
    assert C.latest_checkpoint(tmp_path) == done


def test_finalize_keeps_the_old_checkpoint_of_its_step_until_the_new_one_is_in_place(tmp_path, monkeypatch):
    """Re-saving step 5: the old step-000005 is moved aside (step-000005.old), not deleted, before the new one is
    renamed in, so a crash between the two renames leaves a copy that the next run puts back."""
    from imgalign.trainers import checkpoint as C

    root = tmp_path / "checkpoints"
    final = _fake_checkpoint(tmp_path, 5)
    (final / "trainer_state" / "weights").write_text("old")

    def written() -> Path:
        tmp = _fake_checkpoint(tmp_path, 6).rename(root / ".tmp-step-000005")
        (tmp / "trainer_state" / "weights").write_text("new")
        return tmp

    tmp, real = written(), os.replace

    def killed(src, dst):
        if Path(src) == tmp:
            raise OSError("killed while publishing")
        real(src, dst)

    with monkeypatch.context() as m:
        m.setattr(os, "replace", killed)
        with pytest.raises(OSError, match="killed while publishing"):
            C.finalize(tmp, final)
    assert (root / "step-000005.old" / "trainer_state" / "weights").read_text() == "old"
    C.remove_leftovers(tmp_path)  # what the next save or --resume auto does first
    assert sorted(p.name for p in root.iterdir()) == ["step-000005"]
    assert (final / "trainer_state" / "weights").read_text() == "old"
    C.finalize(written(), final)  # uninterrupted: the new one replaces the old, nothing else is left
    assert sorted(p.name for p in root.iterdir()) == ["step-000005"]
    assert (final / "trainer_state" / "weights").read_text() == "new"


def test_an_interrupted_save_leaves_the_previous_checkpoint_of_its_step_intact(
    sd3_dir, tmp_path, monkeypatch
):
    """A save that fails half-way (here at scheduler.pt) is written in .tmp-step-N: the checkpoint of the same step
    saved before is untouched, and no half-written step-N folder appears."""
    from imgalign.trainers import checkpoint as C

    tr = _sgd_trainer(sd3_dir, tmp_path)
    good = tr.save(1)
    before = {p.relative_to(good): p.read_bytes() for p in good.rglob("*") if p.is_file()}
    with torch.no_grad():
        for p in tr.params:
            p.add_(1.0)
    real = C.torch_save

    def broken(obj, path):
        if path.name == "scheduler.pt":
            raise OSError("disk full")
        real(obj, path)

    monkeypatch.setattr(C, "torch_save", broken)
    for step in (1, 2):
        with pytest.raises(OSError, match="disk full"):
            tr.save(step)
    assert {p.relative_to(good): p.read_bytes() for p in good.rglob("*") if p.is_file()} == before
    root = tmp_path / "run" / "checkpoints"
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".tmp-")) == ["step-000001"]


def test_a_resume_reports_changes_against_the_checkpoints_config_and_keeps_its_logs_once(
    sd3_dir, tmp_path, caplog
):
    """The change is named against the config the checkpoint was trained with, also on a second resume after the
    first was killed before saving, and config.until-step-N.yaml is never overwritten; rollouts.jsonl keeps one row
    per sample and step; a cosine schedule reports a changed max_steps; other shapes and a dropped stateful reward
    give a clear error or a warning."""
    out = tmp_path / "run"
    cfg = tiny_config(sd3_dir, out, train__max_steps=2)
    cfg["log"].update(save_rollouts=True, checkpoint_every=1, keep_last=5)
    cfg["rewards"]["names"] = [
        "imgalign.trainers.testing:red_reward",
        "imgalign.trainers.testing:RunningMeanReward",
    ]
    path = write(cfg, tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0
    ckpt1 = str(out / "checkpoints" / "step-000001")
    for _ in range(2):  # the second: as if the first resume had been killed before its first checkpoint
        with caplog.at_level("WARNING"):
            caplog.clear()
            argv = [
                "train",
                str(path),
                "--resume",
                ckpt1,
                "--set",
                "train.lr=0.002",
                "--set",
                "log.keep_last=6",
            ]
            assert main(argv) == 0  # a log setting changes nothing the steps compute: not named
        assert "changed config (train.lr: 0.001 -> 0.002)" in caplog.text
        assert yaml.safe_load((out / "config.until-step-000001.yaml").read_text())["train"]["lr"] == 0.001
    steps = [json.loads(line)["step"] for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert sorted(steps) == [1] * 4 + [2] * 4  # rows named by their metrics row, as samples/step-N.png
    first = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()][:4]
    prompts = [x["prompt"] for x in sorted(first, key=lambda x: x["sample"])]
    # the G = 2 samples of a group share its prompt
    assert prompts[0] == prompts[1] != prompts[2] == prompts[3]
    assert (out / "samples" / "step-000001.png").is_file() and (out / "samples" / "step-000002.png").is_file()
    cosine = ["train", str(path), "--output-dir", str(tmp_path / "cos"), "--set", "train.lr_schedule=cosine"]
    assert main(cosine) == 0
    with caplog.at_level("INFO"):
        caplog.clear()
        assert main([*cosine, "--resume", "auto", "--max-steps", "3"]) == 0
    assert "train.max_steps: 2 -> 3" in caplog.text  # the schedule now decays over 3 steps
    newest = tmp_path / "cos" / "checkpoints" / "step-000002"
    assert f"resumed from {newest} at step 2" in caplog.text  # the newest of checkpoints 1 and 2
    with caplog.at_level("WARNING"):
        caplog.clear()
        argv = ["train", str(path), "--resume", "auto", "--max-steps", "3"]
        assert main(argv + ["--set", "rewards.names=[imgalign.trainers.testing:red_reward]"]) == 0
    assert "holds the state of reward 'running_mean', which this run does not use" in caplog.text
    assert main(argv + ["--max-steps", "4", "--set", "model.lora_rank=2"]) == 2


def test_a_resume_with_another_trainable_set_names_the_settings(sd3_dir, tmp_path, capsys, monkeypatch):
    """Fewer trainable weights than the checkpoint's (model.trainable_modules) failed inside torch's optimizer with
    'loaded state dict contains a parameter group that doesn't match'; more (a LoRA on a full fine-tune) asked
    'was it a different model?'. Both name the settings to restore."""
    out = tmp_path / "run"
    path = write(tiny_config(sd3_dir, out, train__max_steps=1), tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0
    resume = ["train", str(path), "--resume", "auto", "--max-steps", "2"]
    capsys.readouterr()
    assert main([*resume, "--set", "model.trainable_modules=context_embedder"]) == 2
    err = capsys.readouterr().err
    assert "was trained with other trainable weights" in err and "also trained" in err
    assert "model.trainable_modules" in err and "--output-dir" in err
    assert "see its trainer_state/config.yaml)" in err
    # an older checkpoint without its own config.yaml: the run's is the one to read
    saved = out / "checkpoints" / "step-000001" / "trainer_state" / "config.yaml"
    text = saved.read_text()
    saved.unlink()
    assert main([*resume, "--set", "model.trainable_modules=context_embedder"]) == 2
    assert "see its run's config.yaml)" in capsys.readouterr().err
    saved.write_text(text)
    # another LoRA rank (a LoRA on a full fine-tune, or the same LoRA at another rank) is named from the checkpoint's
    # saved config before the model loads
    cfg = tiny_config(sd3_dir, tmp_path / "lora", train__max_steps=1)
    cfg["model"].update(lora_rank=2)
    lora = write(cfg, tmp_path / "lora.yaml")
    assert main(["train", str(lora)]) == 0
    import imgalign.adapters as A

    def no_load(*args, **kwargs):
        raise AssertionError("the model loaded before the resume check")

    with monkeypatch.context() as m:
        m.setattr(A, "load_adapter", no_load)
        for argv, old, new in (
            ([*resume, "--set", "model.lora_rank=2"], 0, 2),
            (
                ["train", str(lora), "--resume", "auto", "--max-steps", "2", "--set", "model.lora_rank=4"],
                2,
                4,
            ),
        ):
            capsys.readouterr()
            assert main(argv) == 2
            err = capsys.readouterr().err
            assert f"was trained with model.lora_rank={old} and this run sets {new}" in err
            assert f"--set model.lora_rank={old}" in err and "--output-dir" in err
    # a checkpoint without its saved config (an older imgalign): the weights' shapes are compared after loading
    (tmp_path / "lora" / "checkpoints" / "step-000001" / "trainer_state" / "config.yaml").unlink()
    capsys.readouterr()
    assert (
        main(["train", str(lora), "--resume", "auto", "--max-steps", "2", "--set", "model.lora_rank=4"]) == 2
    )
    err = capsys.readouterr().err
    assert "holds trainable weights of other shapes (" in err and ") vs (" in err
    assert "model.lora_rank" in err


def test_resuming_an_earlier_checkpoint_sets_aside_later_ones_at_once(sd3_dir, tmp_path, monkeypatch):
    """Resumed from step 1 of a 3-step run and killed before its first save: the logs are cut to step 1 and steps
    2-3 are already superseded (with their logs), so --resume auto continues from step 1, not from step 3 with rows
    2-3 gone."""
    from imgalign.trainers.trainer import FlowGRPOTrainer

    out = tmp_path / "run"
    cfg = tiny_config(sd3_dir, out, train__max_steps=3)
    cfg["log"].update(checkpoint_every=1, keep_last=5)
    path = write(cfg, tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0

    def killed(self, step):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(FlowGRPOTrainer, "train_step", killed)
        with pytest.raises(KeyboardInterrupt):
            main(["train", str(path), "--resume", str(out / "checkpoints" / "step-000001")])
    assert [r["step"] for r in rows(out)] == [1]
    root = out / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == [
        "step-000001",
        "superseded-step-000002",
        "superseded-step-000003",
    ]
    kept = [json.loads(line)["step"] for line in (root / "superseded-step-000003" / "metrics.jsonl").open()]
    assert kept == [1, 2, 3]
    assert main(["train", str(path), "--resume", "auto"]) == 0
    assert [r["step"] for r in rows(out)] == [1, 2, 3]


def test_resume_from_another_runs_checkpoint_into_a_folder_holding_a_run_is_refused(
    sd3_dir, tmp_path, capsys
):
    """A checkpoint of run y resumed into folder x that holds a run: refused, x untouched (it overwrote x's
    checkpoints and mixed y's rows into x's log). Into a new folder it branches; retried after that branch stopped
    before its first save, it branches again; a folder with another run's early rows is refused."""
    cfg = tiny_config(sd3_dir, tmp_path / "x", train__max_steps=1)
    path = write(cfg, tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0
    assert main(["train", str(path), "--output-dir", str(tmp_path / "y")]) == 0
    before = (tmp_path / "x" / "metrics.jsonl").read_text()
    other = str(tmp_path / "y" / "checkpoints" / "step-000001")
    assert main(["train", str(path), "--resume", other, "--max-steps", "2"]) == 2
    err = capsys.readouterr().err
    assert "holds a run with its own checkpoints" in err and "--resume auto" in err
    assert (tmp_path / "x" / "metrics.jsonl").read_text() == before
    branch = [
        "train",
        str(path),
        "--resume",
        str(tmp_path / "y" / "checkpoints"),
        "--output-dir",
        str(tmp_path / "z"),
    ]
    assert main([*branch, "--max-steps", "2"]) == 0
    assert [r["step"] for r in rows(tmp_path / "z")] == [2]
    shutil.rmtree(tmp_path / "z" / "checkpoints")  # as if it had stopped before its first save
    assert main([*branch, "--max-steps", "3"]) == 0
    assert [r["step"] for r in rows(tmp_path / "z")] == [2, 3]
    shutil.rmtree(tmp_path / "x" / "checkpoints")  # x: another run's rows from step 1, no checkpoint
    assert main(["train", str(path), "--resume", other, "--max-steps", "2"]) == 2
    assert "holds the logs of another run (metrics.jsonl from step 1)" in capsys.readouterr().err
    for bad, msg in ((path, "is a file"), (tmp_path / "nope", "does not exist")):
        assert main(["train", str(path), "--resume", str(bad), "--output-dir", str(tmp_path / "w")]) == 2
        assert msg in capsys.readouterr().err


def test_a_run_with_its_checkpoints_behind_a_symlink_resumes(sd3_dir, tmp_path, monkeypatch):
    """Its own checkpoint, however it is named (through the link, its target, a link to it, a relative path), is a
    branch within the run folder, not another run's checkpoint."""
    out = tmp_path / "run"
    cfg = tiny_config(sd3_dir, out, train__max_steps=1)
    cfg["log"].update(checkpoint_every=1, keep_last=5)
    path = write(cfg, tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0
    os.replace(out / "checkpoints", tmp_path / "scratch")
    (out / "checkpoints").symlink_to(tmp_path / "scratch")
    assert main(["train", str(path), "--resume", "auto", "--max-steps", "2"]) == 0
    (tmp_path / "best").symlink_to(tmp_path / "scratch" / "step-000001")
    monkeypatch.chdir(tmp_path / "scratch")
    names = [
        "step-000001",
        tmp_path / "scratch" / "step-000001",
        tmp_path / "best",
        out / "checkpoints" / "step-000001",
    ]
    for name in names:
        assert main(["train", str(path), "--resume", str(name), "--max-steps", "2"]) == 0, name
        assert [r["step"] for r in rows(out)] == [1, 2]


def test_cuda_rng_states_are_restored_in_device_order(monkeypatch):
    """torch_cuda_10 comes after torch_cuda_2 (not in the text order of the names)."""
    from imgalign.trainers import checkpoint as C

    js, tensors = C.rng_state()  # this machine's (CPU) states, then twelve fake CUDA devices
    got = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda states: got.extend(int(s[0]) for s in states))
    tensors.update({f"torch_cuda_{i}": torch.tensor([i], dtype=torch.uint8) for i in range(12)})
    C.set_rng_state(js, tensors)
    assert got == list(range(12))


def test_checkpoint_readers_name_the_file_and_refuse_a_pickle_beyond_tensors(tmp_path):
    """Every reader raises CheckpointReadError naming the file and its checkpoint: a missing file says so, a
    state.json that is not UTF-8 text is damaged too, and .pt files load with weights_only=True, so a pickle
    holding more than tensors and plain containers (it could run code on load) is refused, not unpickled."""
    from pathlib import PurePosixPath

    from imgalign.trainers import checkpoint as C

    ckpt = tmp_path / "checkpoints" / "step-000001"
    st = ckpt / "trainer_state"
    st.mkdir(parents=True)
    with pytest.raises(C.CheckpointReadError, match=r"optimizer.pt cannot be read \(missing\)") as e:
        C.torch_load(st / "optimizer.pt")
    assert f"checkpoint {ckpt} is damaged" in str(e.value)
    (st / "state.json").write_bytes(b'{"step": "\xff\xfe"}')  # not UTF-8
    with pytest.raises(C.CheckpointReadError, match=r"state.json cannot be read \("):
        C.read_state(ckpt)
    torch.save({"state": {}, "path": PurePosixPath("x")}, st / "scheduler.pt")
    with pytest.raises(C.CheckpointReadError, match=r"scheduler.pt cannot be read \(UnpicklingError"):
        C.torch_load(st / "scheduler.pt")
    torch.save({"state": {}, "lr": [0.5]}, st / "scheduler.pt")
    assert C.torch_load(st / "scheduler.pt") == {"state": {}, "lr": [0.5]}


def test_a_checkpoint_write_cut_by_a_full_disk_is_an_oserror_naming_the_file(tmp_path):
    """A write that fails part-way (here a file-size limit, as `ulimit -f` sets; a full disk alike) is an OSError
    naming the file, so `imgalign train` prints one line saying what to do: torch.save raised RuntimeError
    ("unexpected pos ...") and safetensors SafetensorError, and the user got a traceback."""
    import resource

    from imgalign.trainers import checkpoint as C

    big = {"w": torch.zeros(4096)}  # 16 KB, past the 8 KB limit below
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    # Python ignores SIGXFSZ: writes past it get EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (8192, hard))
    try:
        with pytest.raises(OSError, match=r"cannot write .*optimizer.pt \(.*\): is the disk full") as e:
            C.torch_save(big, tmp_path / "optimizer.pt")
        assert "--resume auto" in str(e.value)
        with pytest.raises(OSError, match=r"cannot write .*trainable.safetensors \(.*File too large"):
            C.save_tensors(tmp_path / "trainable.safetensors", big)
        # the text files too (RNG state, config.yaml, state.json): the same line, not Python's bare EFBIG
        with pytest.raises(OSError, match=r"cannot write .*state.json \(File too large\): .*--resume auto"):
            C.write_text(tmp_path / "state.json", "x" * 10000)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def test_an_output_folder_on_a_file_system_without_flock_trains_unlocked(tmp_path, monkeypatch, caplog):
    """flock fails with ENOSYS on a Lustre mount without -o flock (ENOLCK on some NFS): every imgalign train into
    such a folder failed with '[Errno 38] Function not implemented'; it now trains without the lock, saying so."""
    import errno
    import fcntl

    from imgalign.trainers import checkpoint as C

    def no_flock(fd, op):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    open_fds = len(os.listdir("/dev/fd"))
    with caplog.at_level("WARNING"):
        assert C.lock_output_dir(tmp_path)
    assert "cannot lock" in caplog.text and "(Function not implemented)" in caplog.text
    assert "a second imgalign train started" in caplog.text
    assert len(os.listdir("/dev/fd")) == open_fds  # the lock file's descriptor is not left open
    C.unlock_output_dir(tmp_path)
    caplog.clear()
    with caplog.at_level("WARNING"):  # world pretrain's component folders name their own command
        assert C.lock_output_dir(tmp_path / "..", command="imgalign world pretrain")
    assert "a second imgalign world pretrain started" in caplog.text
    C.unlock_output_dir(tmp_path / "..")


def test_save_tensors_writes_non_contiguous_tensors(tmp_path):
    """A transposed or sliced tensor (a view) is saved as its values: safetensors itself refuses non-contiguous
    tensors."""
    from imgalign.trainers import checkpoint as C

    w = torch.arange(6.0).view(2, 3)
    C.save_tensors(tmp_path / "t.safetensors", {"t": w.T, "col": w[:, 1]})
    got = C.load_tensors(tmp_path / "t.safetensors")
    assert got["t"].tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]] and got["col"].tolist() == [1.0, 4.0]


def test_rng_state_round_trips_every_generator_with_its_cached_gaussian():
    """A resume continues Python's, NumPy's and torch's random streams where the checkpoint left them, including
    the second value of a Gaussian pair that random.gauss and NumPy's legacy generator keep cached (through
    rng_<rank>.json, as a checkpoint stores them)."""
    import random

    import numpy as np

    from imgalign.trainers import checkpoint as C

    def draws():
        return random.gauss(0, 1), random.random(), float(np.random.standard_normal()), torch.rand(3).tolist()

    random.seed(3)
    np.random.seed(3)
    torch.manual_seed(3)
    random.gauss(0, 1), np.random.standard_normal()  # each generator now holds the pair's second value
    js, tensors = C.rng_state()
    want = draws()
    random.seed(9)
    np.random.seed(9)
    torch.manual_seed(9)
    C.set_rng_state(json.loads(json.dumps(js)), tensors)
    assert draws() == want


def test_the_output_folder_lock_is_taken_again_by_its_process_and_freed_whatever_the_spelling(
    tmp_path, monkeypatch
):
    """The process that holds RUN/.lock may take it again (an in-process resume) under another spelling of the
    folder, while another process is refused; unlock frees it whichever spelling it is given."""
    from imgalign.trainers import checkpoint as C

    out = tmp_path / "run"
    out.mkdir()
    monkeypatch.chdir(tmp_path)
    try:
        assert C.lock_output_dir(Path("run"))
        assert C.lock_output_dir(out)  # the same folder, absolute: this process's own lock
        assert not _another_process_locks(out)
    finally:
        C.unlock_output_dir(Path("run"))
    assert _another_process_locks(out)


def test_a_write_error_names_the_os_reason_or_the_first_line_of_the_exception():
    """An OSError is named by its reason (No space left on device); torch's RuntimeError, whose message goes on
    with C++ frames, by its type and first line only."""
    from imgalign.trainers import checkpoint as C

    p = Path("/ckpt/.tmp-step-000001/trainer_state/optimizer.pt")
    msg = str(C.unwritable(p, OSError(28, "No space left on device")))
    assert msg.startswith(f"cannot write {p} (No space left on device): is the disk full")
    e = RuntimeError(
        "[enforce fail at inline_container.cc:603] . unexpected pos 64 vs 0\nframe #0: c10::Error"
    )
    msg = str(C.unwritable(p, e))
    assert (
        f"{p} (RuntimeError: [enforce fail at inline_container.cc:603] . unexpected pos 64 vs 0): is" in msg
    )
    assert "frame #0" not in msg


def test_a_checkpoint_file_that_is_there_but_unreadable_is_not_called_missing(tmp_path):
    """Only a file that does not exist is 'missing'; another OSError (here a folder where state.json should be) is
    named by its type, so the user does not look for a deleted file."""
    from imgalign.trainers import checkpoint as C

    st = tmp_path / "step-000001" / "trainer_state"
    (st / "state.json").mkdir(parents=True)
    with pytest.raises(C.CheckpointReadError, match=r"state.json cannot be read \(IsADirectoryError"):
        C.read_state(tmp_path / "step-000001")


def test_remove_leftovers_puts_back_an_old_copy_only_over_an_incomplete_step_and_never_an_incomplete_copy(
    tmp_path,
):
    """step-N.old is deleted only once step-N is complete (its state.json written): beside a step-N without one (a
    copy cut short) it is the only whole copy and is put back. A step-N.old without state.json is never put back
    as step-N."""
    from imgalign.trainers import checkpoint as C

    root = tmp_path / "checkpoints"
    _fake_checkpoint(tmp_path, 1).rename(root / "step-000001.old")
    (root / "step-000001" / "trainer_state").mkdir(parents=True)  # incomplete: no state.json
    (root / "step-000002.old" / "trainer_state").mkdir(parents=True)  # incomplete copy, no step-000002
    C.remove_leftovers(tmp_path)
    assert [p.name for p in C.list_checkpoints(tmp_path)] == ["step-000001"]
    assert not (root / "step-000002").exists()


def test_finalize_replaces_a_step_that_still_has_an_old_copy_beside_it(tmp_path):
    """A save killed after its second rename leaves step-N and step-N.old; re-saving step N moves step-N aside
    over that stale copy instead of failing on the non-empty folder."""
    from imgalign.trainers import checkpoint as C

    root = tmp_path / "checkpoints"
    final = _fake_checkpoint(tmp_path, 5)
    shutil.copytree(final, root / "step-000005.old")
    tmp = _fake_checkpoint(tmp_path, 6).rename(root / ".tmp-step-000005")
    (tmp / "trainer_state" / "weights").write_text("new")
    C.finalize(tmp, final)
    assert sorted(p.name for p in root.iterdir()) == ["step-000005"]
    assert (final / "trainer_state" / "weights").read_text() == "new"


def test_nft_noise_follows_train_seed(sd3_dir, tmp_path):
    """DiffusionNFT's fresh (t, ε) draws mix in train.seed: two seeds train on different noise."""
    from imgalign.trainers.objectives import NFTObjective, TrainContext
    from imgalign.trainers.testing import first_rollout

    tr = _sgd_trainer(sd3_dir, tmp_path, micro_batch_size=8, updates_per_step=1)
    ro, _ = first_rollout(tr)
    obj = NFTObjective(tr.cfg.objective, tr.cfg.sampling)
    idx, valid = torch.arange(8), torch.ones(8, dtype=torch.bool)
    losses = [
        obj.head(TrainContext(tr.adapter, tr.model, 0, seed), ro, idx, 0, valid).metrics["nft/loss_plus"]
        for seed in (0, 0, 1)
    ]
    assert losses[0] == losses[1] != losses[2]


def test_nft_head_draws_stratified_t_per_term_and_weights_the_losses_by_r_over_beta(
    sd3_dir, tmp_path, monkeypatch
):
    """NFT's fresh draws: sample k of a micro-batch of b gets t in the k-th of b equal strata of [t_min, t_max], and
    each term draws its own noise. Off the old policy (weights moved after it was built) the loss is
    mean(r·L+ + (1 − r)·L−)/β with r = clip(A/(2c) + 1/2, 0, 1), c = objective.nft.adv_clip."""
    from imgalign.trainers.objectives import TrainContext

    nft = {"beta": 0.5, "adv_clip": 2.0, "t_min": 0.2, "t_max": 0.6}
    tr, ro, _ = _step0_trainer(sd3_dir, tmp_path, objective__name="nft", objective__nft=nft)
    idx, valid = torch.arange(4), torch.ones(4, dtype=torch.bool)
    ctx = TrainContext(tr.adapter, tr.model, 0)
    tr.objective.head(ctx, ro, idx, 0, valid)  # builds the old policy from the current weights
    with torch.no_grad():
        for p in tr.model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    seen = []
    velocity = tr.adapter.velocity

    def spy(x, sigma, *args, **kw):
        seen.append((x.detach().clone(), sigma.detach().clone()))
        return velocity(x, sigma, *args, **kw)

    monkeypatch.setattr(tr.adapter, "velocity", spy)
    import imgalign.trainers.nft as nft_mod

    noisy = []
    interpolate = nft_mod.noisy_latent
    monkeypatch.setattr(
        nft_mod, "noisy_latent", lambda x0, t, e: noisy.append((x0, e)) or interpolate(x0, t, e)
    )
    h = tr.objective.head(ctx, ro, idx, 0, valid)
    x_t0, t = seen[-1]
    assert ((t.double() - 0.2) / 0.1).floor().tolist() == [0.0, 1.0, 2.0, 3.0]
    x0, eps = noisy[-1]  # the noisy latent is (1 − t)·x0 + t·ε from the rollout's final (clean) latent
    torch.testing.assert_close(x0, ro.latents[:, -1])
    tb = t.view(-1, 1, 1, 1)
    torch.testing.assert_close(x_t0, (1 - tb) * ro.latents[:, -1] + tb * eps)
    tr.objective.head(ctx, ro, idx, 1, valid)
    assert not torch.allclose(seen[-1][0], x_t0)  # term 1 draws other noise
    r = h.to_signal(torch.tensor([3.0, -3.0, 1.0, -1.0]))
    torch.testing.assert_close(r, torch.tensor([1.0, 0.0, 0.75, 0.25]))
    lp, lm = h.metrics["nft/loss_plus"], h.metrics["nft/loss_minus"]
    assert abs(lp - lm) > 1e-3 * lp  # v_θ differs from the old policy's velocity
    for r, expected in ((1.0, lp / 0.5), (0.0, lm / 0.5), (0.75, (0.75 * lp + 0.25 * lm) / 0.5)):
        assert float(h.total(torch.full((4,), r))[0].detach()) == pytest.approx(expected, rel=1e-5)


def test_nft_noise_follows_each_samples_global_id_not_its_row(sd3_dir, tmp_path, monkeypatch):
    """NFT draws a sample's ε from its global sample id (another process's rows carry ids 4..7, not 0..3): giving
    rows 0 and 1 each other's id swaps their noise, and ids 4..7 draw other noise than 0..3."""
    import imgalign.trainers.nft as nft_mod
    from imgalign.trainers.objectives import TrainContext

    tr, ro, _ = _step0_trainer(sd3_dir, tmp_path, objective__name="nft")
    idx, valid = torch.arange(4), torch.ones(4, dtype=torch.bool)
    ctx = TrainContext(tr.adapter, tr.model, 0)
    noisy = []
    interpolate = nft_mod.noisy_latent
    monkeypatch.setattr(nft_mod, "noisy_latent", lambda x0, t, e: noisy.append(e) or interpolate(x0, t, e))
    eps = {}
    for ids in ([0, 1, 2, 3], [4, 5, 6, 7], [5, 4, 6, 7]):
        ro.sample_ids = torch.tensor(ids)
        tr.objective.head(ctx, ro, idx, 0, valid)
        eps[ids[0]] = noisy[-1]
    assert not torch.allclose(eps[4], eps[0])
    torch.testing.assert_close(eps[5], eps[4][[1, 0, 2, 3]])


def test_nft_leaves_a_masked_sample_out_of_its_loss_and_metrics_even_when_not_finite(sd3_dir, tmp_path):
    """NFT masks samples whose advantage is invalid: a masked sample with a non-finite final latent leaves the loss
    and every metric finite, and the mean optimality probability is the valid samples' mean."""
    from imgalign.trainers.objectives import TrainContext

    tr, ro, _ = _step0_trainer(sd3_dir, tmp_path, objective__name="nft")
    ro.latents[1, -1] = float("nan")
    valid = torch.tensor([True, False, True, True])
    h = tr.objective.head(TrainContext(tr.adapter, tr.model, 0), ro, torch.arange(4), 0, valid)
    r = h.to_signal(torch.tensor([1.0, 5.0, 0.2, -0.1]))
    loss, m = h.total(r)
    assert math.isfinite(float(loss.detach())) and all(math.isfinite(v) for v in m.values()), m
    assert m["nft/r_mean"] == pytest.approx(float(r[valid].mean()), rel=1e-6)
    assert abs(float(r[valid].mean()) - float(r.mean())) > 1e-3


def test_nft_old_policy_and_reference_velocities_use_the_objectives_guidance_scale(sd3_dir, tmp_path):
    """objective.nft.guidance_scale 3: v_θ, the old policy's velocity and the reference's are all guided at 3, so at
    initialisation (old policy = base = current weights) L+ = L−, the reference term is 0 and the norm ratio 1,
    logged in the bucket of the drawn noise level t (here in [0.8, 0.9]: early)."""
    from imgalign.trainers.objectives import TrainContext

    tr, ro, _ = _step0_trainer(
        sd3_dir,
        tmp_path,
        sampling__guidance_scale=3.0,
        objective__name="nft",
        objective__nft={"guidance_scale": 3.0, "ref_weight": 0.4, "t_min": 0.8, "t_max": 0.9},
        objective__vnorm_log=True,
    )
    h = tr.objective.head(
        TrainContext(tr.adapter, tr.model, 0), ro, torch.arange(4), 0, torch.ones(4, dtype=torch.bool)
    )
    assert h.metrics["nft/loss_plus"] > 0
    assert h.metrics["nft/loss_plus"] == pytest.approx(h.metrics["nft/loss_minus"], rel=1e-6)
    assert float(h.extra.detach()) == pytest.approx(0.0, abs=1e-9)
    assert h.metrics["policy/vnorm_ratio"] == pytest.approx(1.0, rel=1e-5)
    assert "vnorm/norm_ratio/early" in h.metrics and "vnorm/norm_ratio/late" not in h.metrics  # t in (2/3, 1]


def test_nft_loss_adds_ref_weight_times_the_squared_velocity_gap_to_the_base(sd3_dir, tmp_path, monkeypatch):
    """objective.nft.ref_weight w: off the base (v_θ = 1.5·v_ref) the NFT loss gains w·mean((v_θ − v_ref)²) =
    w·0.25·mean(v_ref²), v_ref at the head's own noisy latents."""
    from imgalign.trainers.objectives import TrainContext

    w = 0.4
    tr, ro, _ = _step0_trainer(sd3_dir, tmp_path, objective__name="nft", objective__nft={"ref_weight": w})
    _inflate_velocity(tr.model, 1.5)
    idx, valid = torch.arange(4), torch.ones(4, dtype=torch.bool)
    adv = torch.tensor([1.0, 0.5, 0.2, -0.1])
    ctx = TrainContext(tr.adapter, tr.model, 0)
    outs = []
    velocity = tr.adapter.velocity

    def spy(*args, **kw):
        outs.append(velocity(*args, **kw).detach())
        return outs[-1]

    monkeypatch.setattr(tr.adapter, "velocity", spy)
    with_ref = float(tr.objective.loss(ctx, ro, idx, 0, adv, valid)[0].detach())
    v, v_ref = outs[-2], outs[-1]  # v_θ, then the reference's
    torch.testing.assert_close(v, 1.5 * v_ref, rtol=1e-4, atol=1e-5)
    tr.cfg.objective.nft.ref_weight = 0.0
    plain = float(tr.objective.loss(ctx, ro, idx, 0, adv, valid)[0].detach())
    assert with_ref - plain == pytest.approx(w * 0.25 * float(v_ref.pow(2).mean()), rel=1e-4)
    # masked samples (here the last two) are left out of the pull, as from every other term
    part = torch.tensor([True, True, False, False])
    tr.cfg.objective.nft.ref_weight = w
    with_ref = float(tr.objective.loss(ctx, ro, idx, 0, adv, part)[0].detach())
    v_ref = outs[-1]
    tr.cfg.objective.nft.ref_weight = 0.0
    plain = float(tr.objective.loss(ctx, ro, idx, 0, adv, part)[0].detach())
    assert with_ref - plain == pytest.approx(w * 0.25 * float(v_ref[:2].pow(2).mean()), rel=1e-4)


def test_a_launcher_whose_processes_accelerate_runs_alone_is_refused(sd3_dir, tmp_path, monkeypatch, capsys):
    """torchrun with a GPU accelerate config on a machine without GPUs: each process saw 1 process and trained the
    whole batch alone into the same run folder (every step logged twice, exit 0). It is refused before writing."""
    from imgalign.config import ConfigError
    from imgalign.trainers.trainer import check_launch

    check_launch(None, 1)
    check_launch("2", 2)
    with pytest.raises(
        ConfigError, match=r"started 1 processes \(WORLD_SIZE\), but accelerate runs each as 2"
    ):
        check_launch("1", 2)  # a mismatch either way
    monkeypatch.setenv("WORLD_SIZE", "2")
    out = tmp_path / "run"
    assert main(["train", str(write(tiny_config(sd3_dir, out), tmp_path / "c.yaml"))]) == 2
    assert "set ACCELERATE_USE_CPU=true" in capsys.readouterr().err
    assert not out.exists()


def test_a_reward_frozen_on_resume_keeps_its_own_head(sd3_dir, tmp_path, caplog):
    """An online discriminator resumed as a frozen one (head=FILE): the checkpoint's learned head replaced the
    file's without a word; now the file's head holds and the warning says why the saved state is not used."""
    from imgalign.rewards.base import build_reward
    from imgalign.rewards.heads import save_head

    online = "discriminator:features=stats,online=true,ref_size=8,hidden=8"
    out = tmp_path / "run"
    cfg = tiny_config(sd3_dir, out, train__max_steps=1)
    cfg["rewards"]["names"] = ["imgalign.trainers.testing:red_reward", online]
    assert main(["train", str(write(cfg, tmp_path / "c.yaml"))]) == 0
    head = build_reward("discriminator:features=stats,online=true,ref_size=8,hidden=8").head
    with torch.no_grad():
        for p in head.parameters():
            p.fill_(0.25)
    save_head(tmp_path / "head.safetensors", head, "stats", "discriminator", {})
    cfg["rewards"]["names"] = [
        "imgalign.trainers.testing:red_reward",
        f"discriminator:head={tmp_path}/head.safetensors",
    ]
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import FlowGRPOTrainer

    cfg["train"]["max_steps"] = 2
    tr = FlowGRPOTrainer(load_config(FlowGRPOConfig, write(cfg, tmp_path / "c2.yaml")), out)
    with caplog.at_level("WARNING"):
        tr.setup("auto")
    assert "which is not stateful in this run" in caplog.text
    assert all(bool((p == 0.25).all()) for p in tr.rewards["discriminator"].head.parameters())


TREE = str(REPO / "examples" / "shapes" / "tree_grpo.yaml")


@pytest.mark.parametrize(
    "script, args, message",
    [
        (
            "grad_snr.py",
            ["--variant", "ok", "train.lr=1e-4", "--variant", "bad", "train.lrr=1"],
            "variant 'bad'",
        ),
        ("grad_by_step.py", ["--config", TREE], "sampling.rollout=tree"),
        ("grad_by_step.py", ["--batches", "0"], "argument --batches: must be at least 1"),
        ("bench_marble.py", ["--variants", "single,marbel"], "unknown --variants ['marbel']"),
        ("bench_marble.py", ["--config", TREE, "--variants", "single"], "sampling.rollout=tree"),
        ("bench_marble.py", ["--reps", "0"], "argument --reps: must be at least 1"),
        ("bench_marble.py", ["--rewards", "x"], "argument --rewards: expected a positive integer"),
        ("bench_fid.py", ["--batch", "0"], "argument --batch: must be at least 1"),
        ("bench_tree.py", ["--prompts", "0"], "argument --prompts: must be at least 1"),
        ("bench_threads.py", ["--load", "-1"], "--load must be 0 or more, got -1"),
        ("bench_threads.py", ["--rounds", "0"], "argument --rounds: must be at least 1"),
        ("bench_folder_features.py", ["--images", "0"], "argument --images: must be at least 1"),
        ("bench_folder_features.py", ["--features", "stat"], "--features: unknown feature encoder 'stat'"),
    ],
)
def test_bench_scripts_refuse_bad_arguments_before_any_model_loads(script, args, message, tmp_path):
    """Bad bench arguments are a one-line error naming the setting, before any rollout (every --variant of
    grad_snr is checked first; run from another folder, so the default config is found from the script's)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    p = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode != 0 and message in p.stderr, p.stderr[-2000:]
    assert "Traceback" not in p.stderr, p.stderr[-2000:]


def test_each_step_shuffles_its_samples_into_micro_batches_anew(sd3_dir, tmp_path, monkeypatch):
    """The update's micro-batches are a fresh permutation of the step's samples every step (seeded by the step), so
    a sample's neighbours in a micro-batch change from step to step; every sample is trained once per term."""
    from imgalign.trainers.objectives import GRPOObjective

    seen: list[tuple[int, ...]] = []
    loss = GRPOObjective.loss

    def spy(self, ctx, ro, idx, term, adv, valid):
        seen.append(tuple(idx.tolist()))
        return loss(self, ctx, ro, idx, term, adv, valid)

    monkeypatch.setattr(GRPOObjective, "loss", spy)
    out = tmp_path / "run"
    cfg = tiny_config(sd3_dir, out, train__max_steps=3, log__sample_every=0)
    assert main(["train", str(write(cfg, tmp_path / "c.yaml"))]) == 0
    per_step = len(seen) // 3
    steps = [seen[i * per_step : (i + 1) * per_step] for i in range(3)]
    for calls in steps:
        assert sorted(r for mb in set(calls) for r in mb) == [0, 1, 2, 3]
    assert len({calls[0] for calls in steps}) > 1


def test_a_missing_embedded_default_config_says_to_pass_one(capsys, monkeypatch):
    """Installed without examples/, `imgalign train` with no CONFIG names the missing default and what to pass."""
    import imgalign.commands.train as train_cmd

    missing = train_cmd.EXAMPLES / "shapes" / "no_such_default.yaml"  # (--help names it relative to the repo)
    monkeypatch.setattr(train_cmd, "DEFAULT_CONFIG", missing)
    assert main(["train", "--print-config"]) == 2
    assert f"the default config {missing} is missing (installed without examples/)" in capsys.readouterr().err


def test_only_step_folders_named_step_n_are_checkpoints(tmp_path):
    """A complete copy named step-N.old (a re-save cut short) or step-N-backup (the user's) is not a checkpoint of
    the run: --resume auto never picks it, whatever its step."""
    from imgalign.trainers import checkpoint as C

    done = _fake_checkpoint(tmp_path, 10)
    for name in ("step-000020.old", "step-000030-backup"):
        _fake_checkpoint(tmp_path, 99).rename(tmp_path / "checkpoints" / name)
    assert C.list_checkpoints(tmp_path) == [done] and C.latest_checkpoint(tmp_path) == done


def test_a_damaged_checkpoint_off_the_step_names_points_to_the_runs_earlier_one(tmp_path):
    """--resume on a set-aside branch (superseded-step-N) whose state.json is damaged names the run's earlier
    checkpoint to resume from (it said the run had none); a copy under another name (step-N-good) gets the same
    CheckpointReadError naming the file, not an AttributeError from the step-name parser."""
    from imgalign.trainers import checkpoint as C

    root = tmp_path / "checkpoints"
    _fake_checkpoint(tmp_path, 5)
    earlier = _fake_checkpoint(tmp_path, 10)  # the newest before step 40, not the first
    for name in ("superseded-step-000040-1", "step-000040-good"):
        ckpt = _fake_checkpoint(tmp_path, 40).rename(root / name)
        (ckpt / "trainer_state" / "state.json").write_text("{cut")
        with pytest.raises(
            C.CheckpointReadError, match=rf"{name}/trainer_state/state.json cannot be read"
        ) as e:
            C.read_state(ckpt)
        if name.startswith("superseded-"):
            assert f"--resume {earlier}" in str(e.value)


def test_leftover_cleanup_leaves_folders_that_are_not_its_own_alone(tmp_path):
    """Only step-N.old is a re-save's leftover: the user's mine.old (with a checkpoint inside) is not put back over
    mine, nor removed."""
    from imgalign.trainers import checkpoint as C

    root = tmp_path / "checkpoints"
    _fake_checkpoint(tmp_path, 10)
    _fake_checkpoint(tmp_path, 20).rename(root / "mine.old")
    (root / "mine").mkdir()
    C.remove_leftovers(tmp_path)
    assert sorted(p.name for p in root.iterdir()) == ["mine", "mine.old", "step-000010"]
    assert (root / "mine.old" / "trainer_state" / "state.json").is_file()


def test_every_cuda_devices_rng_state_is_saved_by_its_index(monkeypatch):
    """A checkpoint keeps each CUDA device's generator (torch_cuda_<i>) beside the CPU one, so a GPU run resumes
    with the same noise."""
    from imgalign.trainers import checkpoint as C

    states = [torch.tensor([i], dtype=torch.uint8) for i in range(3)]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: states)
    _, tensors = C.rng_state()
    assert sorted(tensors) == ["torch_cpu", "torch_cuda_0", "torch_cuda_1", "torch_cuda_2"]
    assert all(torch.equal(tensors[f"torch_cuda_{i}"], s) for i, s in enumerate(states))


def test_a_write_error_without_an_os_reason_is_named_by_its_message():
    """An OSError raised with a message only (no errno, so no strerror) is named by that message, not "None"."""
    from imgalign.trainers import checkpoint as C

    msg = str(C.unwritable(Path("/ckpt/state.json"), OSError("the mount went away")))
    assert msg.startswith("cannot write /ckpt/state.json (OSError: the mount went away): is the disk full")


def test_the_output_folder_lock_is_exclusive(tmp_path):
    """A second imgalign train takes the same lock: the holder's must be exclusive, or two shared holders would both
    train into the folder."""
    from imgalign.trainers import checkpoint as C

    code = (
        f"import fcntl, os, sys; fd = os.open({str(tmp_path / '.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
        "try:\n    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)\nexcept BlockingIOError:\n    sys.exit(1)"
    )
    try:
        assert C.lock_output_dir(tmp_path)
        assert subprocess.run([sys.executable, "-c", code]).returncode == 1
    finally:
        C.unlock_output_dir(tmp_path)


def test_an_update_goes_on_when_accelerate_reports_no_gradient_norm(sd3_dir, tmp_path, monkeypatch):
    """Under DeepSpeed accelerate's clip_grad_norm_ may return None (the engine clips inside its step): the update is
    still taken (float(None) raised a TypeError) and train/grad_norm is NaN, not a skipped update."""
    from imgalign.trainers.testing import first_rollout

    tr = _sgd_trainer(sd3_dir, tmp_path, micro_batch_size=8, updates_per_step=1)
    monkeypatch.setattr(tr.acc, "clip_grad_norm_", lambda params, max_norm: None)
    ro, _ = first_rollout(tr)
    before = [p.detach().clone() for p in tr.params]
    m = tr._update(0, ro, torch.tensor([1.0, -1.0] * 4), torch.ones(8, dtype=torch.bool))
    assert any(not torch.equal(p.detach(), b) for p, b in zip(tr.params, before))
    assert math.isnan(m["train/grad_norm"]) and m["train/skipped_updates"] == 0.0

"""Bad-input round 17: `imgalign train` under the accelerate launch configs of examples/accelerate/ on CPUs,
`--resume` with edited or mismatched checkpoints, and tiny FLUX / SD3 pipeline folders through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from imgalign.cli import main
from imgalign.config import ConfigError
from imgalign.trainers.testing import write_config
from imgalign.trainers.trainer import accelerator_failure, check_accelerator

torch.set_num_threads(1)


def _one_step_run(model: Path, out: Path) -> dict:
    """A one-step training config of a tiny pipeline (two samples, two steps, no evaluation or samples)."""
    return {
        "model": {"path": str(model)},
        "prompts": {"source": "shapes", "tasks": ["single_object"]},
        "sampling": {"num_steps": 2, "group_size": 2, "samples_per_step": 2, "batch_size": 2},
        "rewards": {"names": ["imgalign.trainers.testing:red_reward"]},
        "train": {"max_steps": 1, "lr": 1e-3, "micro_batch_size": 2},
        "eval": {"every": -1},
        "log": {"output_dir": str(out), "sample_every": 0, "trackers": "none", "progress": False},
    }


def test_fsdp_or_deepspeed_that_accelerate_refuses_is_one_line_naming_the_launch(
    sd3_dir, tmp_path, capsys, monkeypatch
):
    """examples/accelerate/fsdp.yaml launched on CPUs (ACCELERATE_USE_CPU=true) died on every process with a
    traceback from inside Accelerator() ("FSDP parameter initialization with sync_module_states=True is not
    supported on cpu"); DeepSpeed asked for without deepspeed installed likewise. Now one line names the launch and
    the CPU config to use instead, and nothing is written."""
    out = tmp_path / "run"
    path = write_config(_one_step_run(sd3_dir, out), tmp_path / "c.yaml")
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")

    def refuse(
        **kwargs: object,
    ) -> None:  # one process does not build FSDP's plugin: accelerate's error, as raised
        raise RuntimeError(
            "FSDP parameter initialization with `sync_module_states=True` is not supported on cpu."
        )

    monkeypatch.setattr("accelerate.Accelerator", refuse)
    assert main(["train", str(path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "imgalign train: error: accelerate could not set up FSDP: FSDP parameter initialization" in err
    assert "on CPUs launch with examples/accelerate/cpu_2proc.yaml and ACCELERATE_USE_CPU=true" in err
    assert not out.exists()
    # the message's parts for DeepSpeed, and for anything else accelerate refuses
    ds = str(
        accelerator_failure(ImportError("DeepSpeed is not installed."), {"ACCELERATE_USE_DEEPSPEED": "true"})
    )
    assert (
        ds.startswith("accelerate could not set up DeepSpeed: DeepSpeed is not installed. ") and "pip" in ds
    )
    other = str(accelerator_failure(RuntimeError("port in use"), {}))
    assert (
        other
        == "accelerate could not set up the launch: port in use. check the accelerate launch flags or its --config_file"
    )


def test_fp16_on_the_cpu_is_refused_instead_of_training_in_float32(sd3_dir, tmp_path, capsys):
    """train.mixed_precision=fp16 on the CPU trained in float32 without a word (accelerate autocasts to float16 on
    GPUs only; the same gradient norm as `no`), and with model.dtype=float16 died in the first forward with a
    conv2d traceback ("Input type (c10::Half) and bias type (float) should be the same")."""
    out = tmp_path / "run"
    path = write_config(_one_step_run(sd3_dir, out), tmp_path / "c.yaml")
    for extra in ([], ["--set", "model.dtype=float16"]):
        assert main(["train", str(path), "--set", "train.mixed_precision=fp16", *extra]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert (
            "train.mixed_precision=fp16 does nothing on the CPU" in err
            and "set train.mixed_precision=bf16" in err
        )
    assert not out.exists()
    with pytest.raises(ConfigError, match="fp16 does nothing on the CPU"):
        check_accelerator("fp16", "cpu", 1, False, None)
    assert check_accelerator("fp16", "cuda", 1, False, "fp16") is None
    assert check_accelerator("bf16", "cpu", 1, False, "bf16") is None


def test_accelerates_gradient_accumulation_is_refused_outside_deepspeed(
    sd3_dir, tmp_path, capsys, monkeypatch
):
    """ACCELERATE_GRADIENT_ACCUMULATION_STEPS=4 (accelerate's own accumulation) made accelerator.backward divide
    every micro-batch's loss by 4: the run trained with a quarter of the gradient (train/grad_norm 182 instead of
    730), silently. The trainer accumulates its micro-batches itself."""
    out = tmp_path / "run"
    path = write_config(_one_step_run(sd3_dir, out), tmp_path / "c.yaml")
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4")
    assert main(["train", str(path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "ACCELERATE_GRADIENT_ACCUMULATION_STEPS=4) and would divide every gradient by 4" in err
    assert not out.exists()
    # DeepSpeed scales the loss by its own accumulation steps (examples/README.md says to set them)
    assert check_accelerator("no", "cuda", 4, True, "no") is None


def test_a_launchers_mixed_precision_that_the_config_overrides_is_named(
    sd3_dir, tmp_path, caplog, monkeypatch
):
    """`accelerate launch --mixed_precision bf16` (or the bf16 of examples/accelerate/fsdp.yaml and
    deepspeed_zero2.yaml) was silently overridden by train.mixed_precision (no, by default): the run trained in
    float32. A warning now says so and how to train in bf16."""
    out = tmp_path / "run"
    path = write_config(_one_step_run(sd3_dir, out), tmp_path / "c.yaml")
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    with caplog.at_level("WARNING", logger="imgalign"):
        assert main(["train", str(path)]) == 0
    (msg,) = [
        r.getMessage() for r in caplog.records if "the launch asks for mixed precision" in r.getMessage()
    ]
    assert "train.mixed_precision=no" in msg and "add --set train.mixed_precision=bf16" in msg
    # a launcher's fp16 on the CPU: the advice is not the setting that the CPU refuses
    cpu_fp16 = check_accelerator("no", "cpu", 1, False, "fp16")
    assert cpu_fp16 is not None and "fp16 does nothing on the CPU" in cpu_fp16 and "--set" not in cpu_fp16
    assert "add --set train.mixed_precision=fp16" in str(check_accelerator("no", "cuda", 1, False, "fp16"))
    # the launcher's default (no) and the same precision say nothing
    assert check_accelerator("bf16", "cpu", 1, False, "no") is None
    assert check_accelerator("bf16", "cpu", 1, False, "bf16") is None


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{}", "it has no 'step'"),
        ('{"step": 2, "config_hash": "x"}', "it has no 'num_processes'"),
        (
            '{"step": "two", "num_processes": 1, "config_hash": "x"}',
            "its 'step' is 'two', not a whole number",
        ),
        ("[]", "it holds a JSON list, not an object"),
    ],
)
def test_a_state_json_without_what_a_resume_reads_is_a_damaged_checkpoint(
    sd3_dir, tmp_path, capsys, text, why
):
    """A trainer_state/state.json that parses but is not the trainer's (hand-edited, emptied to {}) stopped
    `--resume` with "imgalign train: error: num_processes", "invalid literal for int() with base 10: 'two'" or a
    TypeError traceback. It is now named as damaged, with the run's earlier checkpoint to resume from."""
    old = tmp_path / "old" / "checkpoints"
    for step, body in ((1, '{"step": 1, "num_processes": 1, "config_hash": "x"}'), (2, text)):
        (old / f"step-00000{step}" / "trainer_state").mkdir(parents=True)
        (old / f"step-00000{step}" / "trainer_state" / "state.json").write_text(body)
    out = tmp_path / "run"
    path = write_config(_one_step_run(sd3_dir, out), tmp_path / "c.yaml")
    assert main(["train", str(path), "--resume", str(old / "step-000002")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{old / 'step-000002' / 'trainer_state' / 'state.json'} cannot be read (ValueError: {why})" in err
    assert f"checkpoint {old / 'step-000002'} is damaged" in err and f"--resume {old / 'step-000001'}" in err


def test_a_checkpoint_folder_given_as_the_output_folder_is_refused(sd3_dir, tmp_path, capsys):
    """`--output-dir RUN/checkpoints/step-N --resume auto` (a checkpoint where a run folder belongs) found no
    checkpoint "under" it, started a new run from the base model without a warning and wrote its config, logs and
    checkpoints into the checkpoint folder. A checkpoint folder, and a run's checkpoints/ folder, are refused."""
    from imgalign.trainers.checkpoint import inside_run

    run = tmp_path / "run"
    ckpt = run / "checkpoints" / "step-000002"
    (ckpt / "trainer_state").mkdir(parents=True)
    (ckpt / "trainer_state" / "state.json").write_text('{"step": 2, "num_processes": 1, "config_hash": "x"}')
    path = write_config(_one_step_run(sd3_dir, tmp_path / "unused"), tmp_path / "c.yaml")
    for given, part in (
        (ckpt, "a checkpoint folder"),
        (run / "checkpoints", "the checkpoints folder of a run"),
    ):
        for resume in (["--resume", "auto"], []):
            assert main(["train", str(path), "--output-dir", str(given), *resume]) == 2
            err = " ".join(capsys.readouterr().err.split())
            assert f"--output-dir {str(given)!r} is {part}, not a run folder" in err
            assert f"continue the run with --output-dir {str(run)!r} --resume auto" in err
    assert sorted(p.name for p in ckpt.iterdir()) == ["trainer_state"]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-000002"]
    # a run folder of the user's named checkpoints, beside their training config, is a run folder
    (tmp_path / "proj" / "checkpoints").mkdir(parents=True)
    (tmp_path / "proj" / "config.yaml").write_text("model: {path: shapes}\n")
    assert inside_run(tmp_path / "proj" / "checkpoints") is None and inside_run(run) is None


@pytest.mark.parametrize(("family", "gone"), [("flux", ["text_encoder_2", "tokenizer_2"]), ("sd3", ["vae"])])
def test_a_pipeline_saved_without_a_part_it_generates_with_is_named(sd3_dir, tmp_path, capsys, family, gone):
    """A FLUX pipeline saved without its T5 (from_pretrained(..., text_encoder_2=None), then save_pretrained: null in
    model_index.json) passed the folder check as SD3's optional T5 does, and `imgalign train`, `eval` and `grid`
    died at the first prompt with "'NoneType' object has no attribute 'tokenize'" (an SD3 one without its VAE:
    "... no attribute 'config'"). Now each command names the parts before any model loads."""
    import json
    import shutil

    from imgalign.trainers.testing import tiny_flux_pipeline

    model = tmp_path / "model"
    if family == "flux":
        tiny_flux_pipeline(model)
    else:
        shutil.copytree(sd3_dir, model)
    index = json.loads((model / "model_index.json").read_text())
    for name in gone:
        index[name] = [None, None]
        shutil.rmtree(model / name)
    (model / "model_index.json").write_text(json.dumps(index))
    cfg = write_config(_one_step_run(model, tmp_path / "run"), tmp_path / "c.yaml")
    commands = {
        "train": ["train", str(cfg)],
        "eval": ["eval", "--model", str(model), "--images-per-prompt", "1", "--out", str(tmp_path / "ev")],
        "grid": ["grid", "--model", f"a={model}", "--prompt", "a red cube", "--out", str(tmp_path / "g.png")],
    }
    for name, argv in commands.items():
        assert main(argv) == 2, name
        err = " ".join(capsys.readouterr().err.split())
        assert (
            f"imgalign {name}: error: model folder {str(model)!r} was saved without its {', '.join(gone)}"
            in err
        )
    assert not (tmp_path / "run").exists() and not (tmp_path / "g.png").exists()


def test_a_guidance_scale_for_a_flux_model_without_guidance_embedding_is_named(tmp_path, caplog):
    """sampling.guidance_scale=3.5 (the FLUX.1-dev recipe's) on a FLUX.1-schnell-like transformer (no guidance
    embedding) trained without a word: neither the adapter nor FluxPipeline reads it. A warning now says so; the
    default (1, no guidance) says nothing."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.testing import tiny_flux_pipeline
    from imgalign.trainers.trainer import guidance_settings

    model = tiny_flux_pipeline(tmp_path / "schnell", guidance_embeds=False)
    cfg = _one_step_run(model, tmp_path / "run")
    cfg["sampling"]["guidance_scale"] = 3.5
    with caplog.at_level("WARNING", logger="imgalign"):
        assert main(["train", str(write_config(cfg, tmp_path / "c.yaml"))]) == 0
    (msg,) = [r.getMessage() for r in caplog.records if "has no guidance embedding" in r.getMessage()]
    assert f"model.path {str(model)!r}" in msg and "so sampling.guidance_scale=3.5 changes nothing" in msg
    assert guidance_settings(load_config(FlowGRPOConfig, None, [])) == {}
    both = load_config(FlowGRPOConfig, None, ["sampling.guidance_scale=2", "eval.guidance_scale=3"])
    assert guidance_settings(both) == {"sampling.guidance_scale": 2.0, "eval.guidance_scale": 3.0}


def test_grid_names_a_guidance_a_flux_model_without_guidance_embedding_ignores(tmp_path, caplog):
    """`grid --guidance 3.5` with a FLUX.1-schnell-like model: FluxPipeline ignores the scale silently; a warning
    names the model. Without --guidance (the pipeline's own settings) nothing is said."""
    from imgalign.trainers.testing import tiny_flux_pipeline

    model = tiny_flux_pipeline(tmp_path / "schnell", guidance_embeds=False)
    argv = ["grid", "--model", f"s={model}", "--prompt", "a red circle", "--steps", "1", "--size", "16"]
    with caplog.at_level("WARNING", logger="imgalign"):
        assert main([*argv, "--guidance", "3.5", "--out", str(tmp_path / "g.png")]) == 0
    warned = [r.getMessage() for r in caplog.records if "has no guidance embedding" in r.getMessage()]
    assert warned == [
        "s has no guidance embedding (a FLUX.1-schnell-like transformer): guidance scale 3.5 changes nothing for it"
    ]
    caplog.clear()
    with caplog.at_level("WARNING", logger="imgalign"):
        assert main([*argv, "--out", str(tmp_path / "h.png")]) == 0
    assert "guidance embedding" not in caplog.text


def test_sampling_a_folder_names_a_guidance_a_flux_model_without_guidance_embedding_ignores(tmp_path, caplog):
    """`eval --guidance-scale` (and the shapes suite's own guidance) on a FLUX.1-schnell-like model sampled through
    generate_folder without a word; a model with a guidance embedding, or no scale given, says nothing."""
    from imgalign.pipelines import load_pipeline
    from imgalign.sampling import generate_folder, generate_images
    from imgalign.trainers.testing import tiny_flux_pipeline

    metas = [
        {"tag": "single_object", "include": [{"class": "cat", "count": 1}], "prompt": "a photo of a cat"}
    ]
    for guidance_embeds, guidance, warns in ((False, 3.5, True), (False, None, False), (True, 3.5, False)):
        model = tiny_flux_pipeline(tmp_path / f"flux-{guidance_embeds}", guidance_embeds=guidance_embeds)
        caplog.clear()
        with caplog.at_level("WARNING", logger="imgalign"):
            generate_folder(
                load_pipeline(str(model)),
                metas,
                tmp_path / f"images-{guidance_embeds}-{guidance}",
                1,
                0,
                progress=False,
                sample=generate_images,
                steps=1,
                size=16,
                **({"guidance": guidance} if guidance is not None else {}),
            )
        warned = (
            "has no guidance embedding" in caplog.text and "guidance scale 3.5 changes nothing" in caplog.text
        )
        assert warned == warns, (guidance_embeds, guidance)


def test_more_than_512_t5_tokens_is_refused_before_the_model_loads():
    """model.max_sequence_length=1024 trained a FLUX (or SD3) model on a text length its pipeline refuses to sample
    with ("cannot be greater than 512"), without a word; `imgalign grid --max-sequence-length` refused it already."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig

    with pytest.raises(
        ConfigError, match="model.max_sequence_length=1024: the SD3 and FLUX pipelines take at most 512"
    ):
        load_config(FlowGRPOConfig, None, ["model.max_sequence_length=1024"])
    assert (
        load_config(FlowGRPOConfig, None, ["model.max_sequence_length=512"]).model.max_sequence_length == 512
    )

"""Mutation round 26c: the checkpoint a BASE+OVERLAY hint names (step folders by step, trainer_state/) and the
"checkpoint alone" advice of a full checkpoint on the wrong base."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgalign.cli import main


def _grid_error(model: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """stderr of `imgalign grid --model a=MODEL`, which must refuse it before anything is written."""
    out = tmp_path / "grid.png"
    assert main(["grid", "--model", f"a={model}", "--prompt", "a red square", "--out", str(out)]) == 2
    assert not out.exists()
    return capsys.readouterr().err


def _run(tmp_path: Path, steps: list[str]) -> Path:
    run = tmp_path / "run"
    for step in steps:
        (run / "checkpoints" / step).mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    return run


def test_the_last_checkpoint_is_the_highest_step_not_the_last_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Past step 999999 the names grow a digit: sorted as text, step-1000000 came before step-999999 and the hint
    named the older checkpoint as the one to give. They are ordered by step."""
    run = _run(tmp_path, ["step-999999", "step-1000000"])
    err = _grid_error(f"shapes+{run}", tmp_path, capsys)
    assert f"e.g. '{run / 'checkpoints' / 'step-1000000'}'" in err


def test_a_step_folder_of_under_six_digits_is_no_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Checkpoints are step-NNNNNN (six digits or more); a step-7 folder (a user's copy, not the trainer's) was
    named, as the highest step, in place of step-000002."""
    run = _run(tmp_path, ["step-000002", "step-7"])
    err = _grid_error(f"shapes+{run}", tmp_path, capsys)
    assert f"e.g. '{run / 'checkpoints' / 'step-000002'}'" in err
    assert "step-7" not in err


def test_a_trainer_state_folder_without_its_state_is_not_called_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only a trainer_state/ that holds state.json is a checkpoint's training state: a folder that is merely so
    named was told "it is the training state of checkpoint PARENT: give the checkpoint itself"."""
    folder = tmp_path / "trainer_state"
    folder.mkdir()
    (folder / "notes.txt").write_text("x\n")
    err = _grid_error(f"shapes+{folder}", tmp_path, capsys)
    assert "is not a fine-tuned model folder" in err
    assert "training state" not in err


def test_a_transformer_only_checkpoint_is_not_offered_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checkpoint holding only transformer/ (no model_index.json) that records its base: the message names the
    base, and does not offer "--model CKPT" alone, which is no whole pipeline."""
    import torch
    from safetensors.torch import save_file

    ckpt = tmp_path / "run" / "checkpoints" / "step-000002"
    (ckpt / "transformer").mkdir(parents=True)
    config = {"_class_name": "SD3Transformer2DModel", "in_channels": 4, "joint_attention_dim": 64}
    (ckpt / "transformer" / "config.json").write_text(json.dumps({**config, "pooled_projection_dim": 64}))
    save_file({"w": torch.zeros(1)}, str(ckpt / "transformer" / "diffusion_pytorch_model.safetensors"))
    info = {"family": "sd3", "base_model": "/models/my-base", "lora": None}
    (ckpt / "imgalign_model.json").write_text(json.dumps(info))
    overlay = ckpt / "transformer"
    err = _grid_error(f"shapes+{overlay}", tmp_path, capsys)
    assert (
        f"it was trained on '/models/my-base' (its imgalign_model.json): give /models/my-base+{overlay}"
        in err
    )
    assert "the checkpoint alone" not in err


def _wrong_transformer(folder: Path) -> None:
    """A transformer in `folder` taking 64-wide text features (the shapes model's take 128)."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    config = {"_class_name": "SD3Transformer2DModel", "in_channels": 4, "joint_attention_dim": 64}
    (folder / "config.json").write_text(json.dumps({**config, "pooled_projection_dim": 64}))
    save_file({"w": torch.zeros(1)}, str(folder / "diffusion_pytorch_model.safetensors"))


def test_a_transformer_folder_of_another_name_does_not_borrow_its_parents_base(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only a checkpoint's own transformer/ is read with the checkpoint's imgalign_model.json: a transformer saved
    as tf_copy/ beside that file is no part of the checkpoint, and naming the checkpoint's base for it guesses.
    The general advice stays."""
    ckpt = tmp_path / "ckpt"
    _wrong_transformer(ckpt / "tf_copy")
    info = {"family": "sd3", "base_model": "/models/my-base", "lora": None}
    (ckpt / "imgalign_model.json").write_text(json.dumps(info))
    overlay = ckpt / "tf_copy"
    err = _grid_error(f"shapes+{overlay}", tmp_path, capsys)
    assert "joint_attention_dim 64 against the base's 128" in err
    assert f"give the base model it was trained on, as BASE+{overlay}" in err
    assert "/models/my-base" not in err


def test_an_unreadable_record_keeps_the_mismatch_and_the_general_advice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checkpoint whose imgalign_model.json is no JSON: the error stays the transformer's mismatch with the general
    advice (the record's own ValueError, about that file, took its place)."""
    ckpt = tmp_path / "ckpt"
    _wrong_transformer(ckpt / "transformer")
    (ckpt / "imgalign_model.json").write_text("{not json")
    overlay = ckpt / "transformer"
    err = _grid_error(f"shapes+{overlay}", tmp_path, capsys)
    assert "joint_attention_dim 64 against the base's 128" in err
    assert f"give the base model it was trained on, as BASE+{overlay}" in err

"""Bad-input round 30c: a full fine-tune's checkpoint (or its transformer/) put on a base it does not fit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgalign.cli import main


def _checkpoint(tmp_path: Path, base: str | None) -> Path:
    """A full fine-tune's checkpoint whose transformer takes 64-wide text features (the shapes model's take 128),
    recording `base` in imgalign_model.json (no such file with None)."""
    import torch
    from safetensors.torch import save_file

    ckpt = tmp_path / "run" / "checkpoints" / "step-000002"
    (ckpt / "transformer").mkdir(parents=True)
    config = {"_class_name": "SD3Transformer2DModel", "in_channels": 4, "joint_attention_dim": 64}
    (ckpt / "transformer" / "config.json").write_text(json.dumps({**config, "pooled_projection_dim": 64}))
    save_file({"w": torch.zeros(1)}, str(ckpt / "transformer" / "diffusion_pytorch_model.safetensors"))
    (ckpt / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusion3Pipeline"}))
    if base is not None:
        info = {"family": "sd3", "base_model": base, "lora": None}
        (ckpt / "imgalign_model.json").write_text(json.dumps(info))
    return ckpt


@pytest.mark.parametrize("part", ["", "transformer"])
def test_a_checkpoint_on_the_wrong_base_names_its_recorded_base(
    part: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--model shapes+CKPT` (or shapes+CKPT/transformer) where CKPT was trained on another base said "give the
    base model it was trained on, as BASE+CKPT" though CKPT's imgalign_model.json records that base, and the
    checkpoint alone is a whole model. It now names the recorded base and the checkpoint alone (as a LoRA
    checkpoint's message does), before any model loads."""
    ckpt = _checkpoint(tmp_path, "/models/my-base")
    overlay = ckpt / part if part else ckpt
    out = tmp_path / "grid.png"
    assert (
        main(["grid", "--model", f"a=shapes+{overlay}", "--prompt", "a red square", "--out", str(out)]) == 2
    )
    err = capsys.readouterr().err
    assert "joint_attention_dim 64 against the base's 128" in err
    assert (
        f"it was trained on '/models/my-base' (its imgalign_model.json): give /models/my-base+{overlay}"
        in err
    )
    assert f", or the checkpoint alone (--model {ckpt})" in err
    assert not out.exists()


def test_a_transformer_without_a_recorded_base_keeps_the_general_advice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without imgalign_model.json nothing is named that the files do not say."""
    ckpt = _checkpoint(tmp_path, None)
    out = tmp_path / "grid.png"
    assert main(["grid", "--model", f"a=shapes+{ckpt}", "--prompt", "a red square", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"give the base model it was trained on, as BASE+{ckpt}" in err
    assert "imgalign_model.json" not in err

"""A LoRA checkpoint on a base of another size: imgalign's error alone, without diffusers' log of every
mismatching weight first (own fixes, stop 57)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)


def test_a_lora_that_does_not_fit_is_named_once_without_the_loaders_log(
    tmp_path: Path, library_log: list[logging.LogRecord]
) -> None:
    import geneval_real_tiny as T
    from diffusers import StableDiffusion3Pipeline
    from peft import LoraConfig, get_peft_model
    from peft.utils import get_peft_model_state_dict

    from imgalign.pipelines import absent_components, load_pipeline

    base = T.build_tiny_sd3(tmp_path / "base")
    transformer = StableDiffusion3Pipeline.from_pretrained(base, **absent_components(base)).transformer
    lora = get_peft_model(
        transformer, LoraConfig(r=2, target_modules=["to_q", "to_v"], init_lora_weights=False)
    )
    layers = {k.removeprefix("base_model.model."): v for k, v in get_peft_model_state_dict(lora).items()}
    StableDiffusion3Pipeline.save_lora_weights(str(tmp_path / "ckpt"), transformer_lora_layers=layers)
    before = len(library_log)  # (building the tiny base logs its own notices)
    with pytest.raises(ValueError, match="does not fit base model 'shapes'.*size mismatch for"):
        load_pipeline(f"shapes+{tmp_path / 'ckpt'}")
    # diffusers logged "Loading default_0 was unsuccessful with the following error:" and every mismatching weight
    assert [r.getMessage()[:60] for r in library_log[before:] if r.levelno >= logging.WARNING] == []

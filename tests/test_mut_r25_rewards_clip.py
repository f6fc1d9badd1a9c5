"""Round 25 mutation tests for ``imgalign.rewards.clip``: a NaN weight is refused before the model loads, a
config.json that is not a JSON object is no transformers model, a folder with only ``processor_config.json`` has a
processor, and bfloat16 loads open_clip in bf16."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch


def test_a_nan_weight_is_refused_before_the_model_loads(monkeypatch) -> None:
    """weight=nan (from Python: the reward spec parser refuses it) made every score NaN, every sample masked."""
    import imgalign.rewards.clip as clip_mod

    def no_load(*args: object) -> None:
        raise AssertionError("the model loaded before the options were checked")

    monkeypatch.setattr(clip_mod, "load_clip", no_load)
    with pytest.raises(ValueError, match="clip reward: weight must be > 0, got nan"):
        clip_mod.CLIPReward(weight=float("nan"))


def test_a_config_json_that_is_a_list_names_no_transformers_model(tmp_path: Path) -> None:
    from imgalign.rewards.clip import other_transformers_model, transformers_clip_config, transformers_config

    (tmp_path / "config.json").write_text(json.dumps([{"model_type": "clip"}]), encoding="utf-8")
    assert transformers_config(str(tmp_path)) is None
    assert transformers_clip_config(str(tmp_path)) is None
    assert other_transformers_model("clip reward", str(tmp_path)) is None


def test_a_folder_with_only_a_processor_config_has_a_processor(tmp_path: Path) -> None:
    from imgalign.rewards.clip import missing_processor

    assert missing_processor("a CLIP", str(tmp_path)) is not None
    (tmp_path / "processor_config.json").write_text("{}", encoding="utf-8")
    assert missing_processor("a CLIP", str(tmp_path)) is None


@pytest.mark.parametrize(
    ("dtype", "precision"),
    [(torch.float32, "fp32"), (torch.float16, "fp16"), (torch.bfloat16, "bf16"), (torch.float64, "fp32")],
)
def test_open_clip_loads_in_the_precision_of_the_reward_dtype(dtype: torch.dtype, precision: str) -> None:
    from imgalign.rewards.clip import _precision

    assert _precision(dtype) == precision


def test_a_key_error_of_a_named_architecture_is_not_called_an_incomplete_folder_config(monkeypatch) -> None:
    """Only a local-dir: folder has an open_clip_config.json whose missing field is the cause; for an architecture
    with a pretrained tag the error is open_clip's own and is not renamed."""
    import open_clip

    from imgalign.rewards.clip import load_open_clip

    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("text_cfg")

    monkeypatch.setattr(open_clip, "create_model", broken)
    with pytest.raises(KeyError, match="text_cfg"):
        load_open_clip("ViT-B-32", torch.device("cpu"), torch.float32, pretrained="openai")

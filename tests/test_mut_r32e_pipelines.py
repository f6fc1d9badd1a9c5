"""Round 32e mutation survivors of imgalign/pipelines.py: tests that pin the behaviour they changed."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from imgalign.pipelines import LENGTH_WARNING, apply_overlay, length_warning_said, restore_length_warning


def test_a_tokenizer_in_two_slots_has_its_first_mark_put_back() -> None:
    """One tokenizer object given as both tokenizer and tokenizer_2 is marked once and restored to what it held
    before the call (not to the mark the first slot set), so the line is said again for the next prompts."""
    shared = SimpleNamespace(deprecation_warnings={})
    pipe = SimpleNamespace(tokenizer=shared, tokenizer_2=shared, tokenizer_3=None)
    before = length_warning_said(pipe)
    assert shared.deprecation_warnings == {LENGTH_WARNING: True}
    restore_length_warning(before)
    assert shared.deprecation_warnings == {}


class _Denoiser:
    loaded: list[tuple[str, torch.dtype]] = []

    @classmethod
    def from_pretrained(cls, folder: str, dtype: torch.dtype) -> _Denoiser:
        cls.loaded.append((folder, dtype))
        return cls()


def test_a_transformer_overlay_whose_config_names_no_class_loads_as_the_bases_class(tmp_path: Path) -> None:
    """A transformer config.json without ``_class_name`` (written by hand) is loaded with the base's denoiser class;
    only one naming another class is refused."""
    _Denoiser.loaded = []
    pipe = SimpleNamespace(transformer=_Denoiser())
    (tmp_path / "config.json").write_text(json.dumps({"in_channels": 4}))
    apply_overlay(pipe, tmp_path, torch.bfloat16)
    assert _Denoiser.loaded == [(str(tmp_path), torch.bfloat16)]
    assert isinstance(pipe.transformer, _Denoiser)
    (tmp_path / "config.json").write_text(json.dumps({"_class_name": "FluxTransformer2DModel"}))
    with pytest.raises(
        ValueError, match="holds a FluxTransformer2DModel, but the base pipeline's transformer is a _Denoiser"
    ):
        apply_overlay(pipe, tmp_path)
    assert len(_Denoiser.loaded) == 1


def test_only_a_folder_named_trainer_state_is_called_a_checkpoints_training_state(tmp_path: Path) -> None:
    """A folder given after the '+' that holds a state.json but is not a checkpoint's trainer_state/ gets no hint
    to give its parent checkpoint."""
    from imgalign.pipelines import overlay_kind

    for name in ("trainer_state", "other"):
        (tmp_path / "ckpt" / name).mkdir(parents=True)
        (tmp_path / "ckpt" / name / "state.json").write_text("{}")
    with pytest.raises(ValueError, match="it is the training state of checkpoint"):
        overlay_kind(tmp_path / "ckpt" / "trainer_state")
    with pytest.raises(ValueError) as info:
        overlay_kind(tmp_path / "ckpt" / "other")
    assert "training state" not in str(info.value)
    assert str(info.value).endswith("or a transformer/ subfolder")


def test_a_fine_tune_that_records_no_family_is_left_to_the_loader(tmp_path: Path) -> None:
    """An imgalign_model.json without a ``family`` (or a null one) is not called a fine-tune of another family."""
    from imgalign.pipelines import ModelSpec, check_overlay_family

    for info in ({"base_model": "shapes"}, {"family": None, "base_model": "shapes"}):
        (tmp_path / "imgalign_model.json").write_text(json.dumps(info))
        check_overlay_family(ModelSpec("ft", "shapes", str(tmp_path)), tmp_path)
    (tmp_path / "imgalign_model.json").write_text(json.dumps({"family": "flux", "base_model": "shapes"}))
    with pytest.raises(ValueError, match="is a flux fine-tune"):
        check_overlay_family(ModelSpec("ft", "shapes", str(tmp_path)), tmp_path)

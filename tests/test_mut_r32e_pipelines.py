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

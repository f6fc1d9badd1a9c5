"""Round 28 (helper d) mutation survivors of imgalign/pipelines.py: tests that pin the behaviour they changed."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from imgalign.pipelines import ignores_guidance, overlay_kind, parse_model_arg, recorded_base


def test_a_base_with_an_empty_overlay_is_refused() -> None:
    with pytest.raises(ValueError, match=r"BASE\+OVERLAY needs both parts"):
        parse_model_arg("m=shapes+")


def test_a_run_folder_given_as_overlay_is_named_a_training_run_folder(tmp_path: Path) -> None:
    (tmp_path / "checkpoints" / "step-000010").mkdir(parents=True)
    with pytest.raises(ValueError, match="it is a training run folder: give one of its checkpoints"):
        overlay_kind(tmp_path)


def test_a_null_recorded_base_is_no_base(tmp_path: Path) -> None:
    (tmp_path / "imgalign_model.json").write_text(json.dumps({"base_model": None}))
    assert recorded_base(tmp_path) is None


def test_a_denoiser_without_the_guidance_setting_reads_guidance() -> None:
    assert ignores_guidance(SimpleNamespace(config=SimpleNamespace())) is False
    assert ignores_guidance(SimpleNamespace(config=SimpleNamespace(guidance_embeds=False))) is True

"""Mutation round 27 (shapes_models.py): behaviour the earlier tests let a mutant change unseen."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from imgalign.hub import ASSETS, EMBEDDED, ModelNotFoundError, embedded_path
from imgalign.shapes_models import load_shapes_clip, load_shapes_vlm


def _needs(name: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        not (ASSETS / EMBEDDED[name]).is_dir(), reason=f"the embedded {name} is not in this checkout"
    )


@_needs("shapes-vlm")
def test_a_vlm_folder_without_its_tokenizer_is_named_incomplete_with_the_pretrain_component(
    tmp_path: Path,
) -> None:
    """A shapes-vlm folder without tokenizer.json is refused by name, with the `--component vlm` that remakes it (the
    component, not the model name: `--component shapes-vlm` is no choice)."""
    vlm = tmp_path / "vlm"
    vlm.mkdir()
    for f in embedded_path("shapes-vlm").iterdir():
        if f.is_file() and f.name != "tokenizer.json":
            (vlm / f.name).symlink_to(f)
    with pytest.raises(ModelNotFoundError) as e:
        load_shapes_vlm(folder=vlm)
    assert "incomplete (missing tokenizer.json)" in str(e.value)
    assert "`imgalign world pretrain --component vlm`" in str(e.value)


@_needs("shapes-clip")
def test_the_clip_loads_as_the_dtype_asked() -> None:
    model, _, _ = load_shapes_clip(dtype=torch.float64)
    assert {p.dtype for p in model.parameters()} == {torch.float64}


@_needs("shapes-vlm")
def test_the_vlm_loads_as_the_dtype_asked_and_float32_by_default() -> None:
    """(survivor S6: a load_shapes_vlm that ignored `dtype` passed every test)"""
    model, _ = load_shapes_vlm(dtype=torch.float64)
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    model, _ = load_shapes_vlm()
    assert {p.dtype for p in model.parameters()} == {torch.float32}

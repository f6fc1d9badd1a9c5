"""Mutation round 31 (helper d): rewards/heads.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from imgalign.rewards.heads import FeatureHead, fit_head, load_head, save_head


def test_one_positive_example_is_refused_as_too_few_not_blamed_on_val_frac() -> None:
    """The per-class minimum holds for the positives too; the val_frac message would say to lower a val_frac
    that is not the cause."""
    with pytest.raises(ValueError, match=r"need at least 2 examples per class, got 1 and 5"):
        fit_head(torch.randn(1, 3), torch.randn(5, 3), epochs=1)


def test_a_head_is_saved_into_a_folder_that_does_not_exist_yet(tmp_path: Path) -> None:
    out = tmp_path / "new" / "deeper" / "head.safetensors"
    save_head(out, FeatureHead(3), "shapes-clip", "discriminator", {})
    head, meta = load_head(out, "discriminator")
    assert head.dim == 3 and meta["task"] == "discriminator"


def test_a_safetensors_file_without_metadata_is_named_as_no_feature_head(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    path = tmp_path / "weights.safetensors"
    save_file({"w": torch.zeros(2)}, str(path))
    with pytest.raises(ValueError, match=r"weights\.safetensors is not an imgalign feature head"):
        load_head(path)

"""rewards/heads.py: fit_head's held-out split, which mutation round 21 (second pass) found unchecked."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from imgalign.rewards.heads import FeatureHead, fit_head, load_head, save_head


def _separable(n: int, sign: float, seed: int) -> torch.Tensor:
    """`n` 4-d features around `sign` * (3, 3, 3, 3): the classes are far apart, so any fitted head separates them."""
    g = torch.Generator().manual_seed(seed)
    return sign * 3.0 + 0.1 * torch.randn(n, 4, generator=g)


def test_the_held_out_count_is_rounded_not_truncated() -> None:
    """val_frac 0.1 of 7 is 0.7, which rounds to 1 held out per class: val_acc is reported (truncating it to 0
    held out dropped val_acc)."""
    fit = fit_head(_separable(7, 1.0, 0), _separable(7, -1.0, 1), epochs=100, val_frac=0.1)
    assert fit.metrics["val_acc"] == 1.0


def test_a_rounded_up_held_out_count_can_leave_too_few_to_train_on() -> None:
    """val_frac 0.7 of 5 is 3.5, which rounds to 4 held out, leaving 1 per class to train on: refused (truncating
    held out 3 and trained on 2)."""
    with pytest.raises(ValueError, match="val_frac 0.7 leaves 1 and 1 examples to train on"):
        fit_head(torch.randn(5, 4), torch.randn(5, 4), epochs=1, val_frac=0.7)


def test_no_val_acc_when_one_class_has_nothing_held_out() -> None:
    """val_frac 0.1 holds out 1 of 10 positives but 0 of 4 negatives: there is no held-out accuracy over both
    classes, so val_acc is left out (not the positives' accuracy alone)."""
    fit = fit_head(_separable(10, 1.0, 0), _separable(4, -1.0, 1), epochs=100, val_frac=0.1)
    assert "val_acc" not in fit.metrics
    assert fit.metrics["n_pos"] == 10.0 and fit.metrics["n_neg"] == 4.0


def test_no_val_acc_when_nothing_is_held_out() -> None:
    """val_frac 0 trains on every example and reports no val_acc."""
    fit = fit_head(_separable(4, 1.0, 0), _separable(4, -1.0, 1), epochs=5, val_frac=0.0)
    assert "val_acc" not in fit.metrics


def test_a_head_of_a_relative_encoder_folder_records_it_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """save_head records `dinov2:enc` (a folder of the working folder) as the absolute folder, so the head finds
    its encoder when read from another working folder."""
    (tmp_path / "enc").mkdir()
    monkeypatch.chdir(tmp_path)
    save_head("h.safetensors", FeatureHead(4), "dinov2:enc", "drl", {})
    with safe_open(str(tmp_path / "h.safetensors"), framework="pt") as fh:
        assert (fh.metadata() or {})["features"] == f"dinov2:{tmp_path / 'enc'}"


def test_loading_a_folder_as_a_head_says_it_is_a_folder(tmp_path: Path) -> None:
    """A head= naming a folder that exists is refused as a folder (not as a file that "does not exist")."""
    with pytest.raises(FileNotFoundError, match="is a folder; give the .safetensors file"):
        load_head(tmp_path)

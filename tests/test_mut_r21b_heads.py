"""rewards/heads.py: fit_head's held-out split, which mutation round 21 (second pass) found unchecked."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

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


def _rewrite(path: Path, change: dict[str, torch.Tensor], drop: str = "") -> None:
    """Write the head file at `path` again with tensors `change`d and metadata key `drop` left out."""
    with safe_open(str(path), framework="pt") as fh:
        meta = {k: v for k, v in (fh.metadata() or {}).items() if k != drop}
    save_file({**load_file(str(path)), **change}, str(path), metadata=meta)


def test_a_head_without_extra_metadata_reads_as_no_extra(tmp_path: Path) -> None:
    """`extra` is optional in a head's metadata: a head without it loads with extra {} (not as damaged)."""
    path = tmp_path / "h.safetensors"
    save_head(path, FeatureHead(4), "stats", "drl", {"val_acc": 0.9})
    _rewrite(path, {}, drop="extra")
    assert load_head(path)[1]["extra"] == {}


@pytest.mark.parametrize("buffer", ["mean", "std"])
def test_a_head_with_nan_standardisation_is_refused(tmp_path: Path, buffer: str) -> None:
    """A NaN in the head's feature mean or scale (buffers, not weights of its net) makes every score NaN: the head
    is refused as damaged (a NaN mean was taken)."""
    path = tmp_path / "h.safetensors"
    save_head(path, FeatureHead(4), "stats", "drl", {})
    _rewrite(path, {buffer: torch.tensor([0.5, float("nan"), 1.0, 1.0])})
    with pytest.raises(ValueError, match=r"damaged imgalign feature head \(NaN or inf weights\)"):
        load_head(path)


def test_a_loaded_head_is_in_eval_mode(tmp_path: Path) -> None:
    """load_head returns the head in eval mode, as its docstring says (a Dropout layer of the hidden head would
    otherwise be active when it scores)."""
    path = tmp_path / "h.safetensors"
    save_head(path, FeatureHead(4, hidden=3), "stats", "drl", {})
    head, _ = load_head(path)
    assert not head.training and not any(m.training for m in head.modules())


@pytest.mark.parametrize(
    ("task", "command"),
    [("artifact", "fit-artifact"), ("discriminator", "fit-discriminator"), ("drl", r"fit-\.\.\.")],
)
def test_a_damaged_head_names_the_command_that_fits_its_task(tmp_path: Path, task: str, command: str) -> None:
    """A damaged artifact or discriminator head says which `imgalign rewards fit-...` command fits it again."""
    path = tmp_path / "h.safetensors"
    save_head(path, FeatureHead(4), "stats", task, {})
    _rewrite(path, {"std": torch.tensor([1.0, float("inf"), 1.0, 1.0])})
    with pytest.raises(ValueError, match=rf"fit it again with `imgalign rewards {command}`"):
        load_head(path)

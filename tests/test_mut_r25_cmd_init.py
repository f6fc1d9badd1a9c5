"""Mutation round 25 (commands/__init__.py): behaviour the earlier tests let a mutant change unseen."""

from __future__ import annotations

import pytest
import torch

from imgalign.commands import check_device


@pytest.mark.skipif(torch.xpu.is_available(), reason="this machine computes on xpu")
def test_a_device_kind_torch_asserts_it_was_not_built_for_is_refused_by_name() -> None:
    """xpu on a PyTorch built without it fails with an AssertionError ("Torch not compiled with XPU enabled"),
    not a RuntimeError: it is refused as a device this PyTorch cannot compute on, like mps."""
    with pytest.raises(
        ValueError, match=r"^--device 'xpu': this machine's PyTorch cannot compute on xpu devices"
    ):
        check_device("xpu")


@pytest.mark.parametrize("device", ["hpu", "privateuseone"])
def test_a_device_kind_whose_torch_module_is_missing_is_refused_by_name(device: str) -> None:
    """hpu (Habana) and privateuseone parse as torch devices, but making a tensor there imports a torch module this
    PyTorch lacks: a ModuleNotFoundError traceback (imgalign's one error line takes ValueError, OSError...). They
    are refused as devices this PyTorch cannot compute on."""
    with pytest.raises(
        ValueError, match=rf"^--device {device!r}: this machine's PyTorch cannot compute on {device}"
    ):
        check_device(device)

"""imgalign.adapters, mutation round 22: what the weight headers tell the trainer's start-up check when a transformer
folder holds no safetensors weights."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from imgalign.adapters import read_saved_weights


def test_a_folder_without_safetensors_tensors_leaves_the_check_to_after_loading(tmp_path: Path) -> None:
    """A transformer saved as .bin, or a safetensors file holding no tensor, tells no weight names: None (the checks
    after loading apply), not an empty record that would call every LoRA target a name of no module."""
    torch.save({"proj_out.weight": torch.zeros(2, 2)}, tmp_path / "diffusion_pytorch_model.bin")
    assert read_saved_weights(tmp_path) is None
    save_file({}, str(tmp_path / "diffusion_pytorch_model.safetensors"))
    assert read_saved_weights(tmp_path) is None

"""Round 24 (second pass) mutation survivors of imgalign/adapters.py: tests that pin the behaviour they changed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from imgalign.adapters import FlowAdapter, SavedWeights, saved_lora_targets_error


def test_a_target_naming_no_saved_module_is_shown_linear_layers_defaults_first() -> None:
    layers = ["b.conv", "b.lin", "b.to_q", "b.to_out.0"]
    saved = SavedWeights(
        keys=[f"{n}.weight" for n in layers],
        modules={"b", *layers},
        linear=["b.lin", "b.to_out.0", "b.to_q"],
        layers=layers,
    )
    said = saved_lora_targets_error(saved, ["to_q", "nope"])
    assert said is not None
    assert said.endswith(
        "'nope' names no module; give names (or name endings) of the transformer's Linear layers, "
        "e.g. to_out.0, to_q, lin"
    )


def _adapter() -> FlowAdapter:
    """A FlowAdapter around a one-layer stand-in transformer, built without a pipeline."""
    adapter = object.__new__(FlowAdapter)
    adapter.transformer = torch.nn.Linear(2, 2)
    adapter.lora_config = None
    adapter._reference = None
    return adapter


def test_the_reference_model_is_refused_without_a_lora_or_a_kept_copy() -> None:
    adapter, used = _adapter(), []
    with pytest.raises(RuntimeError, match="no reference model"), adapter.reference() as ref:
        used.append(ref)
    assert used == []  # refused before the block, not handed the trained model


def test_a_bfloat16_sd3_model_gives_float32_velocities(sd3_dir: Path) -> None:
    from imgalign.adapters import load_adapter

    ad = load_adapter(sd3_dir, dtype=torch.bfloat16)
    x = ad.init_noise([torch.Generator().manual_seed(0)])
    for guidance in (1.0, 2.0):
        assert ad.velocity(x, 0.5, ad.encode(["a circle"]), guidance).dtype == torch.float32

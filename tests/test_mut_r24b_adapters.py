"""Round 24 (second pass) mutation survivors of imgalign/adapters.py: tests that pin the behaviour they changed."""

from __future__ import annotations

from imgalign.adapters import SavedWeights, saved_lora_targets_error


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

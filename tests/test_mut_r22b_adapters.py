"""imgalign.adapters, mutation round 22 second pass: a full fine-tune's saved folder keeps its base model's
component index."""

from __future__ import annotations

from pathlib import Path


def test_a_full_save_keeps_the_base_models_component_index_as_it_is(tmp_path: Path) -> None:
    """model_index.json is the base's own file (how it declares absent parts such as T5), not the one
    ``save_pretrained`` writes, which adds the base folder's absolute path as ``_name_or_path``."""
    from imgalign import hub
    from imgalign.adapters import load_adapter

    a = load_adapter("shapes")
    a.enable_full_finetune(keep_reference=False)
    a.save(tmp_path / "full", base_model="shapes")
    base_index = Path(hub.resolve("shapes")) / "model_index.json"
    assert (tmp_path / "full" / "model_index.json").read_bytes() == base_index.read_bytes()
    assert "_name_or_path" not in (tmp_path / "full" / "model_index.json").read_text()

"""imgalign.pipelines, mutation round 22 second pass: a PEFT LoRA folder (adapter_config.json) is merged into the
base's transformer once loaded."""

from __future__ import annotations

from pathlib import Path

import torch


def test_a_peft_lora_folder_is_merged_into_the_base_transformer(tmp_path: Path) -> None:
    """The pipeline samples with the base's own transformer class holding the LoRA in its weights, not a PeftModel
    running the base and the LoRA side by side at every step; its output is the LoRA model's."""
    from peft import LoraConfig, get_peft_model

    from imgalign.pipelines import load_pipeline

    pipe = load_pipeline("shapes")
    base_class = type(pipe.transformer)
    torch.manual_seed(0)
    lora = get_peft_model(
        load_pipeline("shapes").transformer,
        LoraConfig(r=2, lora_alpha=4, target_modules=["to_q", "to_v"], init_lora_weights=False),
    )
    lora.save_pretrained(str(tmp_path / "ck"))
    assert (tmp_path / "ck" / "adapter_config.json").is_file()

    merged = load_pipeline(f"ck=shapes+{tmp_path / 'ck'}").transformer
    assert type(merged) is base_class
    assert not [n for n, _ in merged.named_parameters() if "lora_" in n]

    cfg = pipe.transformer.config
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, cfg.in_channels, cfg.sample_size, cfg.sample_size, generator=g)
    text = torch.randn(1, 4, cfg.joint_attention_dim, generator=g)
    pooled = torch.randn(1, cfg.pooled_projection_dim, generator=g)
    t = torch.tensor([500.0])
    with torch.no_grad():
        args = dict(hidden_states=x, encoder_hidden_states=text, pooled_projections=pooled, timestep=t)
        want = lora(**args).sample
        got = merged(**args).sample
        base = pipe.transformer(**args).sample
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert (got - base).abs().max() > 1e-3

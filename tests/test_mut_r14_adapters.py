"""imgalign.adapters, mutation round 14: the weight names read from a transformer's safetensors headers (preflight's
check of model.lora_targets and model.trainable_modules before loading) agree with the loaded model's, the
LoRA-target endings, and the user-visible parts of add_lora's and restrict_trainable's refusals."""

from __future__ import annotations

import pytest
import torch

from imgalign.adapters import (
    linear_module_names,
    load_adapter,
    read_saved_weights,
    saved_lora_targets_error,
    saved_trainable_names,
)
from imgalign.trainers.testing import tiny_flux_pipeline

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def flux_dir(tmp_path_factory):
    return tiny_flux_pipeline(tmp_path_factory.mktemp("flux"))


def test_a_top_level_indexed_layer_keeps_its_parent_in_its_target_ending():
    """A Linear layer at index 0 of a top-level list is targeted as ``to_out.0`` (peft matches name ends), not as
    ``0``, which would select index 0 of every list."""
    nn = torch.nn
    m = nn.ModuleDict({"to_out": nn.ModuleList([nn.Linear(2, 2)]), "head": nn.Sequential(nn.Linear(2, 2))})
    assert linear_module_names(m) == ["to_out.0", "head.0"]


def test_the_headers_of_every_shard_are_read_and_only_weights_of_two_or_more_dimensions_are_layers(tmp_path):
    """A sharded transformer (diffusers' ``-0000k-of-0000n`` files) is read whole. Its layers are the modules
    whose ``weight`` has 2 or more dimensions: a 2-D weight is a Linear layer (what the examples of a refusal
    name), a 4-D one a convolution (peft wraps it too); a 1-D weight (a norm) and a 2-D tensor that is not a
    weight are neither; every dotted prefix of a tensor's module is a module."""
    from safetensors.torch import save_file

    save_file(
        {"blocks.0.attn.to_q.weight": torch.zeros(4, 4), "blocks.0.attn.to_q.bias": torch.zeros(4)},
        str(tmp_path / "diffusion_pytorch_model-00001-of-00002.safetensors"),
    )
    save_file(
        {
            "norm.weight": torch.zeros(4),
            "pos_embed.proj.weight": torch.zeros(4, 4, 1, 1),
            "head.table": torch.zeros(2, 4),
            "proj_out.weight": torch.zeros(4, 4),
        },
        str(tmp_path / "diffusion_pytorch_model-00002-of-00002.safetensors"),
    )
    saved = read_saved_weights(tmp_path)
    assert saved is not None
    assert saved.keys == [
        "blocks.0.attn.to_q.bias",
        "blocks.0.attn.to_q.weight",
        "head.table",
        "norm.weight",
        "pos_embed.proj.weight",
        "proj_out.weight",
    ]
    assert saved.modules == {
        "blocks",
        "blocks.0",
        "blocks.0.attn",
        "blocks.0.attn.to_q",
        "head",
        "norm",
        "pos_embed",
        "pos_embed.proj",
        "proj_out",
    }
    assert saved.linear == ["blocks.0.attn.to_q", "proj_out"]
    assert saved.layers == ["blocks.0.attn.to_q", "pos_embed.proj", "proj_out"]
    assert saved_trainable_names(saved, ["proj"]) == [
        "pos_embed.proj.lora_A.default.weight",
        "pos_embed.proj.lora_B.default.weight",
    ]
    assert saved_trainable_names(saved, []) == []  # no target selects nothing (not every weight)


def test_an_unreadable_safetensors_header_leaves_the_check_to_after_loading(tmp_path):
    """A damaged file (safetensors' own error, not an OSError) gives None: preflight does not fail on it, and
    loading reports the damage."""
    (tmp_path / "diffusion_pytorch_model.safetensors").write_bytes(b"garbage, not a header")
    assert read_saved_weights(tmp_path) is None


@pytest.mark.parametrize(
    ("family", "targets"),
    [
        # proj_out is a top-level Linear; 'proj' ends net.0.proj and the patch embedding's Conv2d (pos_embed.proj),
        # not add_k_proj
        ("sd3", ["proj_out", "proj", "context_embedder"]),
        ("flux", ["proj_out", "x_embedder", "proj"]),
    ],
)
def test_the_trainable_names_read_from_the_headers_are_the_loaded_lora_weights(
    sd3_dir, flux_dir, family, targets
):
    """preflight matches model.trainable_modules against these names: they must be the LoRA weights add_lora
    makes, for a top-level layer, for a name that ends other names without a dot, and for a convolution (a
    trainable_modules pattern for SD3's pos_embed LoRA was refused before loading, though it trains)."""
    src = sd3_dir if family == "sd3" else flux_dir
    saved = read_saved_weights(src / "transformer")
    ad = load_adapter(src)
    ad.add_lora(rank=2, alpha=4, target_modules=targets)
    assert saved_trainable_names(saved, targets) == sorted(n for n, _ in ad.trainable_named_parameters())


def test_a_target_that_ends_a_module_name_without_a_dot_is_refused_from_the_headers(sd3_dir):
    """'k_proj' ends add_k_proj but names no module (peft matches whole dotted parts): refused before loading
    with the message add_lora gives after it."""
    saved = read_saved_weights(sd3_dir / "transformer")
    ad = load_adapter(sd3_dir)
    with pytest.raises(ValueError) as after_load:
        ad.add_lora(rank=2, alpha=4, target_modules=["to_q", "k_proj"])
    assert saved_lora_targets_error(saved, ["to_q", "k_proj"]) == str(after_load.value)
    assert "'k_proj' names no module; " in str(after_load.value)


def test_peft_refusing_targets_gives_the_first_200_characters_of_its_reason(sd3_dir, monkeypatch):
    ad = load_adapter(sd3_dir)
    reason = "".join(f"{i:03d}" for i in range(100))  # 300 characters, each position readable

    def refuse(cfg):
        raise ValueError(reason)

    monkeypatch.setattr(ad.transformer, "add_adapter", refuse)
    with pytest.raises(ValueError) as e:
        ad.add_lora(rank=2, alpha=4, target_modules=["to_q"])
    assert f": {reason[:200]}; give names" in str(e.value)


def test_restrict_trainable_keeps_the_weights_any_pattern_matches(sd3_dir):
    """model.trainable_modules lists alternatives: a weight is kept when one pattern matches it."""
    ad = load_adapter(sd3_dir)
    ad.add_lora(rank=2, alpha=4, target_modules=["to_q", "to_k"])
    kept = ad.restrict_trainable(["to_q.lora_A", "to_k"])
    assert kept == [n for n, _ in ad.trainable_named_parameters()]
    # (layer, LoRA matrix) of peft's names: ...attn.to_q.lora_A.default.weight
    assert {tuple(n.split(".")[-4:-2]) for n in kept} == {
        ("to_q", "lora_A"),
        ("to_k", "lora_A"),
        ("to_k", "lora_B"),
    }


def test_preflight_accepts_trainable_modules_of_a_convolution_lora(sd3_dir):
    """model.lora_targets=[proj] also puts a LoRA on SD3's patch embedding (a Conv2d, pos_embed.proj), so
    model.trainable_modules=[pos_embed] trains its weights: preflight must not refuse it as matching none."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import preflight

    sets = ["model.lora_rank=2", "model.lora_targets=[proj]", "model.trainable_modules=[pos_embed]"]
    cfg = load_config(FlowGRPOConfig, None, [f"model.path={sd3_dir}", *sets])
    assert preflight(cfg, output_dir=sd3_dir.parent / "run") == str(sd3_dir.resolve())
    ad = load_adapter(sd3_dir)
    ad.add_lora(rank=2, alpha=4, target_modules=["proj"])
    assert ad.restrict_trainable(["pos_embed"]) == [
        "pos_embed.proj.lora_A.default.weight",
        "pos_embed.proj.lora_B.default.weight",
    ]

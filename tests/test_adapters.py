"""Model adapters on tiny random SD3 and FLUX pipelines: the adapter's ODE sampler reproduces the pipeline's own
sampling loop, CFG is one batched forward, LoRA/full checkpoints load back with diffusers' own loaders."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch

from imgalign.adapters import FluxAdapter, SD3Adapter, detect_family, load_adapter
from imgalign.pipelines import load_pipeline
from imgalign.trainers import kernels as K
from imgalign.trainers.testing import tiny_flux_pipeline

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def flux_dir(tmp_path_factory):
    return tiny_flux_pipeline(tmp_path_factory.mktemp("flux"))


def ode_sample(adapter, prompts, steps, guidance, gens):
    x = adapter.init_noise(gens)
    cond = adapter.encode(prompts)
    sig = adapter.sigmas(steps)
    with torch.no_grad():
        for i in range(steps):
            v = adapter.velocity(x, sig[i], cond, guidance)
            x = K.ode_step(x, v, sig[i], sig[i + 1]).prev_sample
    return x


def pipeline_sample(adapter, prompts, steps, guidance, latents, hw, output_type="latent", **extra):
    """The diffusers pipeline's own sampling from `latents` at height, width `hw` (the reference for ode_sample)."""
    return adapter.pipe(
        prompt=prompts,
        num_inference_steps=steps,
        guidance_scale=guidance,
        latents=latents,
        height=hw[0],
        width=hw[1],
        output_type=output_type,
        **extra,
    ).images


def test_detect_family(sd3_dir, flux_dir, tmp_path):
    assert detect_family(sd3_dir) == "sd3"
    assert detect_family(flux_dir) == "flux"
    with pytest.raises(
        FileNotFoundError, match="is not a diffusers pipeline folder \\(no model_index.json\\)"
    ):
        detect_family(tmp_path)
    (tmp_path / "sdxl").mkdir()
    (tmp_path / "sdxl" / "model_index.json").write_text(
        json.dumps({"_class_name": "StableDiffusionXLPipeline"})
    )
    with pytest.raises(
        ValueError, match="holds a 'StableDiffusionXLPipeline'; supported pipelines: FluxPipeline, "
    ):
        detect_family(tmp_path / "sdxl")
    with pytest.raises(ValueError, match="unknown model family"):
        load_adapter(sd3_dir, family="sdxl")


def test_load_adapter_gives_the_shapes_model_its_trained_context_length(sd3_dir):
    """Library callers get the one zero 'T5' token the shapes model was trained with (with the pipeline's 256 the
    strict judge passed 0.21 of 24 prompts' images against 0.75); other models keep their pipeline's default."""
    from imgalign.sampling import MAX_SEQUENCE_LENGTH

    assert load_adapter("shapes").max_sequence_length == MAX_SEQUENCE_LENGTH
    assert load_adapter("shapes", max_sequence_length=8).max_sequence_length == 8
    # the trainer passes None for "the model's own" (model.max_sequence_length: 0)
    assert load_adapter("shapes", max_sequence_length=None).max_sequence_length == MAX_SEQUENCE_LENGTH
    assert load_adapter(sd3_dir).max_sequence_length == SD3Adapter.default_max_sequence_length


@pytest.mark.parametrize("guidance", [1.0, 3.0])
def test_sd3_adapter_matches_pipeline(sd3_dir, guidance):
    ad = load_adapter(sd3_dir)
    assert isinstance(ad, SD3Adapter) and ad.latent_shape() == (4, 8, 8)
    assert ad.nfe_per_step(guidance) == (2 if guidance > 1 else 1)
    prompts = ["a photo of a red circle", "two squares"]
    gens = [torch.Generator().manual_seed(i) for i in range(2)]
    ours = ode_sample(ad, prompts, 3, guidance, gens)
    init = ad.init_noise([torch.Generator().manual_seed(i) for i in range(2)])
    ref = pipeline_sample(ad, prompts, 3, guidance, init, (8, 8))
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-5)
    img = ad.decode(ours)
    assert img.shape == (2, 3, 8, 8) and 0 <= img.min() and img.max() <= 1


def test_flux_adapter_matches_pipeline(flux_dir):
    ad = load_adapter(flux_dir, max_sequence_length=77)
    assert isinstance(ad, FluxAdapter) and ad.latent_shape() == (16, 4)
    assert ad.nfe_per_step(3.5) == 1  # guidance-distilled: one forward per step
    prompts = ["a photo of a cat", "a dog"]
    ours = ode_sample(ad, prompts, 3, 3.5, [torch.Generator().manual_seed(i) for i in range(2)])
    init = ad.init_noise([torch.Generator().manual_seed(i) for i in range(2)])
    ref = pipeline_sample(ad, prompts, 3, 3.5, init, (8, 8), max_sequence_length=77)
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-5)
    assert ad.decode(ours).shape == (2, 3, 8, 8)
    # a seed gives the pipeline's own starting noise (drawn [C/4, h, w] per generator, then packed)
    pipe_noise = ad.pipe.prepare_latents(
        2,
        ad.transformer.config.in_channels // 4,
        8,
        8,
        torch.float32,
        "cpu",
        [torch.Generator().manual_seed(i) for i in range(2)],
    )[0]
    assert torch.equal(init, pipe_noise)


def test_flux_packing_of_a_non_square_image_is_diffusers_layout_and_round_trips(flux_dir):
    """Height 8, width 12: latents (C, 8, 12) packed as FluxPipeline._pack_latents packs them (2x2 patches, row
    by row), unpacked back exactly, and sampled as the pipeline samples that size."""
    from diffusers import FluxPipeline

    ad = load_adapter(flux_dir, height=8, width=12, max_sequence_length=77)
    c = ad.transformer.config.in_channels // 4
    assert ad.latent_shape() == (4 * 6, 4 * c)  # (8/2) x (12/2) patches of 4 latent pixels
    gens = [torch.Generator().manual_seed(i) for i in range(2)]
    z = torch.stack([torch.randn((c, 8, 12), generator=g) for g in gens])  # (B, C, H, W)
    packed = FluxPipeline._pack_latents(z, 2, c, 8, 12)
    assert torch.equal(ad.init_noise([torch.Generator().manual_seed(i) for i in range(2)]), packed)
    assert torch.equal(ad._unpack(packed), z)
    prompts = ["a photo of a cat", "a dog"]
    ours = ode_sample(ad, prompts, 2, 3.5, [torch.Generator().manual_seed(i) for i in range(2)])
    ref = pipeline_sample(ad, prompts, 2, 3.5, packed, (8, 12), max_sequence_length=77)
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-5)
    assert ad.decode(ours).shape == (2, 3, 8, 12)


def test_bfloat16_holds_the_frozen_weights_and_keeps_the_vae_and_sd3_timesteps_in_float32(
    sd3_dir, monkeypatch
):
    ad = load_adapter(sd3_dir, dtype=torch.bfloat16)
    assert ad.pipe.text_encoder.dtype == ad.transformer.dtype == torch.bfloat16
    assert ad.pipe.vae.dtype == torch.float32
    seen = []
    real = ad.transformer.forward
    monkeypatch.setattr(ad.transformer, "forward", lambda **kw: seen.append(kw["timestep"]) or real(**kw))
    ad.velocity(ad.init_noise([torch.Generator().manual_seed(0)]), 0.98738, ad.encode(["a circle"]))
    assert seen[0].dtype == torch.float32 and float(seen[0][0]) == pytest.approx(987.38, abs=1e-3)


def test_sd3_non_square_latents_and_decoded_images_are_the_pipelines_own(sd3_dir):
    """Height 8, width 12: latents [C, H/f, W/f] (not transposed), and decode gives the pipeline's own images
    (latents / scaling_factor + shift_factor through the VAE, then [-1, 1] -> [0, 1])."""
    ad = load_adapter(sd3_dir, height=8, width=12)
    assert ad.latent_shape() == (4, 8, 12) and ad.pipe.vae.config.shift_factor != 0
    prompts = ["a photo of a red circle", "two squares"]
    ours = ode_sample(ad, prompts, 2, 1.0, [torch.Generator().manual_seed(i) for i in range(2)])
    init = ad.init_noise([torch.Generator().manual_seed(i) for i in range(2)])
    ref = pipeline_sample(ad, prompts, 2, 1.0, init, (8, 12), output_type="pt")
    img = ad.decode(ours)
    assert img.shape == (2, 3, 8, 12)
    torch.testing.assert_close(img, ref, rtol=1e-4, atol=1e-5)


def test_a_resolution_the_model_cannot_take_is_refused(flux_dir):
    with pytest.raises(ValueError, match="width 7 does not fit this model: use a multiple of 2"):
        load_adapter(flux_dir, height=8, width=7)  # (the tiny FLUX VAE does not downsample: 2x2 packing only)
    with pytest.raises(ValueError, match="height -8 does not fit this model"):
        load_adapter(flux_dir, height=-8, width=8)  # a multiple of 2, but no size


def test_prompt_cache_encodes_each_prompt_once(sd3_dir, monkeypatch):
    ad = load_adapter(sd3_dir)
    calls = []
    orig = ad._encode_uncached
    monkeypatch.setattr(ad, "_encode_uncached", lambda ps: calls.append(list(ps)) or orig(ps))
    c1 = ad.encode(["a", "b", "a"])
    c2 = ad.encode(["b", "a"])
    assert calls == [["a"], ["b"]]  # each distinct prompt once, on its own
    torch.testing.assert_close(c1.embeds[0], c2.embeds[1])


def test_prompt_embedding_does_not_depend_on_batch_mates(sd3_dir):
    # bitwise: a prompt's conditioning is the same whatever it was first encoded with (resume across epochs)
    a1 = load_adapter(sd3_dir).encode(["a photo of a cat", "x"])
    a2 = load_adapter(sd3_dir).encode(["a photo of a cat", "a photo of two dogs and a horse"])
    assert torch.equal(a1.embeds[0], a2.embeds[0]) and torch.equal(a1.pooled[0], a2.pooled[0])


@pytest.mark.parametrize(
    "targets, why",
    [
        (["no_such"], "'no_such' names no module"),
        (["to_q", "to_vv"], "'to_vv' names no module"),  # peft alone trains to_q and skips the typo silently
        (["to_q", "k_proj"], "'k_proj' names no module"),  # a name ends at a dot: add_k_proj is not k_proj
        (["transformer_blocks"], "'transformer_blocks' names a ModuleList, not a Linear layer"),
        (["to_q", "norm_out"], "'norm_out' names a AdaLayerNormContinuous, not a Linear layer"),
    ],
)
def test_bad_lora_targets_name_the_setting_and_valid_names(sd3_dir, targets, why):
    """Not peft's raw message (for a non-Linear module, its whole repr): the setting, what is wrong with it and
    examples of the transformer's Linear layers."""
    ad = load_adapter(sd3_dir)
    with pytest.raises(ValueError) as e:
        ad.add_lora(rank=2, alpha=4, target_modules=targets)
    msg = str(e.value)
    assert (
        msg.startswith(f"model.lora_targets {targets}: {why}; ") and "e.g. to_k, to_out.0, to_q, to_v" in msg
    )
    assert "\n" not in msg and "base_layer" not in msg  # examples read before peft wrapped any module
    # nothing is left wrapped (peft had wrapped to_q before refusing norm_out), so another add_lora works
    assert not [n for n, _ in ad.transformer.named_modules() if "base_layer" in n]
    ad.add_lora(rank=2, alpha=4)
    assert ad.trainable_named_parameters()


def test_lora_targets_and_trainable_modules_are_checked_against_the_weight_headers_before_loading(
    sd3_dir, flux_dir, monkeypatch, tmp_path
):
    """preflight reads the transformer's safetensors headers: a misspelt LoRA target or a trainable_modules pattern
    that matches nothing is refused as after loading (which took minutes for SD3.5 or FLUX), and nothing loads.
    The names the headers give are the loaded model's: its Linear layers' endings and its trainable parameters,
    full fine-tune or LoRA."""
    from imgalign.adapters import (
        linear_module_names,
        read_saved_weights,
        saved_lora_targets_error,
        saved_trainable_names,
    )
    from imgalign.config import ConfigError, load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import preflight

    for src in (sd3_dir, flux_dir):
        saved = read_saved_weights(src / "transformer")
        ad = load_adapter(src)
        # every weight, and the buffers saved with them (SD3's pos_embed): a necessary condition
        assert saved_trainable_names(saved, None) == sorted(ad.transformer.state_dict())
        with pytest.raises(ValueError) as after_load:
            ad.add_lora(rank=2, alpha=4, target_modules=["to_q", "to_vv"])
        assert saved_lora_targets_error(saved, ["to_q", "to_vv"]) == str(after_load.value)
        examples = ", ".join(linear_module_names(ad.transformer)[:8])
        assert "'to_vv' names no module; " in str(after_load.value) and examples in str(after_load.value)
        # a name that exists (whatever its type) and a trailing index pass here
        assert saved_lora_targets_error(saved, ["to_q", "norm_out", "to_out.0"]) is None
        ad.add_lora(rank=2, alpha=4, target_modules=["to_q", "to_out.0"])
        lora = sorted(n for n, _ in ad.trainable_named_parameters())
        assert saved_trainable_names(saved, ["to_q", "to_out.0"]) == lora
    assert read_saved_weights(sd3_dir / "no_such") is None  # no headers: checked after loading
    # a variant saved beside the weights (diffusers' variant="fp16") names the same tensors: counted once
    two = tmp_path / "two"
    shutil.copytree(sd3_dir / "transformer", two)
    shutil.copy(two / "diffusion_pytorch_model.safetensors", two / "diffusion_pytorch_model.fp16.safetensors")
    assert read_saved_weights(two) == read_saved_weights(sd3_dir / "transformer")

    monkeypatch.setattr("imgalign.pipelines.load_pipeline", lambda *a, **k: pytest.fail("a model loaded"))
    run = sd3_dir.parent / "run"
    for sets, error in (
        (
            ["model.lora_rank=2", "model.lora_targets=[to_kk]"],
            r"model.lora_targets \['to_kk'\]: 'to_kk' names no ",
        ),
        (
            ["model.trainable_modules=[to_kk]"],
            r"model.trainable_modules \['to_kk'\] matches none of the \d+ ",
        ),
        # with LoRA the patterns are matched against the LoRA weights' names
        (
            ["model.lora_rank=2", "model.trainable_modules=[norm_out]"],
            r"\['norm_out'\] matches none of the 8 ",
        ),
    ):
        cfg = load_config(FlowGRPOConfig, None, [f"model.path={sd3_dir}", *sets])
        with pytest.raises(ConfigError, match=error):
            preflight(cfg, output_dir=run)
    # full fine-tuning attaches no LoRA: its targets are not read
    for sets in (
        ["model.lora_targets=[to_kk]"],
        ["model.lora_rank=2", "model.trainable_modules=[to_q.lora_B]"],
    ):
        cfg = load_config(FlowGRPOConfig, None, [f"model.path={sd3_dir}", *sets])
        assert preflight(cfg, output_dir=run) == str(sd3_dir.resolve())


def test_lora_init_follows_its_seed_and_the_reference_is_the_base_model(sd3_dir):
    """add_lora's init depends on init_seed alone (not on the global RNG: runs are reproducible), and
    reference() is the LoRA-disabled base (the KL reference), the LoRA back on afterwards."""
    a, b, c, base = (load_adapter(sd3_dir) for _ in range(4))
    a.add_lora(rank=2, alpha=4, init_seed=0)
    torch.randn(5)  # the global RNG moves between the two inits
    b.add_lora(rank=2, alpha=4, init_seed=0)
    c.add_lora(rank=2, alpha=4, init_seed=1)
    pa, pb, pc = (dict(ad.trainable_named_parameters()) for ad in (a, b, c))
    assert all(torch.equal(pa[n], pb[n]) for n in pa)
    assert not all(torch.equal(pa[n], pc[n]) for n in pa)
    with torch.no_grad():
        for n, p in pa.items():
            if "lora_B" in n:  # B starts at zero (LoRA = base): move it so the two differ
                p.fill_(0.05)
    x = base.init_noise([torch.Generator().manual_seed(0)])
    cond = base.encode(["a red circle"])
    with torch.no_grad():
        v_base = base.velocity(x, 0.5, cond)
        v_lora = a.velocity(x, 0.5, cond)
        with a.reference() as ref:
            v_ref = a.velocity(x, 0.5, cond, transformer=ref)
        v_after = a.velocity(x, 0.5, cond)
    assert not torch.allclose(v_lora, v_base, atol=1e-4)
    torch.testing.assert_close(v_ref, v_base)
    torch.testing.assert_close(v_after, v_lora)


def test_lora_save_loads_with_diffusers(sd3_dir, flux_dir, tmp_path):
    for src in (sd3_dir, flux_dir):
        ad = load_adapter(src)
        ad.add_lora(rank=2, alpha=4)
        names = [n for n, _ in ad.trainable_named_parameters()]
        assert names and all("lora_" in n for n in names)
        with torch.no_grad():
            for _, p in ad.trainable_named_parameters():
                p.add_(0.05)
        x = ad.init_noise([torch.Generator().manual_seed(0)])
        cond = ad.encode(["a red circle"])
        with torch.no_grad():
            v_lora = ad.velocity(x, 0.5, cond, 1.0)
            with ad.reference() as ref:
                v_base = ad.velocity(x, 0.5, cond, 1.0, transformer=ref)
        assert not torch.allclose(v_lora, v_base)
        out = tmp_path / src.name
        ad.save(out, base_model=str(src))
        base = load_adapter(src)
        base.pipe.load_lora_weights(str(out))  # diffusers' own loader
        with torch.no_grad():
            torch.testing.assert_close(base.velocity(x, 0.5, cond, 1.0), v_lora, rtol=1e-4, atol=1e-5)
        pipe = load_pipeline(out)
        assert type(pipe).__name__ == type(ad.pipe).__name__
        assert json.loads((out / "imgalign_model.json").read_text())["family"] == ad.family


def test_full_save_loads_with_from_pretrained(sd3_dir, tmp_path, diffusers_save_log):
    ad = load_adapter(sd3_dir)
    ad.enable_full_finetune(keep_reference=True)
    with torch.no_grad():
        for _, p in ad.trainable_named_parameters():
            p.mul_(1.01)
    ad.save(tmp_path / "full", base_model=str(sd3_dir))
    # the absent T5 is declared in model_index.json; diffusers' warning for it on every save is silenced
    assert not [r for r in diffusers_save_log if "cannot be saved" in r.getMessage()]
    assert json.loads((tmp_path / "full" / "model_index.json").read_text())["text_encoder_3"] == [None, None]
    again = load_adapter(tmp_path / "full")
    x = ad.init_noise([torch.Generator().manual_seed(0)])
    cond = ad.encode(["a"])
    with torch.no_grad():
        torch.testing.assert_close(again.velocity(x, 0.3, cond), ad.velocity(x, 0.3, cond))
        with ad.reference() as ref:
            base = load_adapter(sd3_dir)
            torch.testing.assert_close(
                ad.velocity(x, 0.3, cond, transformer=ref), base.velocity(x, 0.3, cond)
            )


def test_the_shapes_model_takes_its_trained_size_multiples_of_vae_factor_times_patch_and_its_context():
    """The shapes model (VAE factor 4, patch 2, sample_size 16): 64x64 images by default, latents [4, H/4, W/4]
    (height first), sides multiples of 8 (the refusal names a size it can take), CLIP tokens + 1 zero 'T5' token."""
    from imgalign.sampling import MAX_SEQUENCE_LENGTH

    ad = load_adapter("shapes")
    assert (ad.height, ad.width, ad.latent_shape()) == (64, 64, (4, 16, 16))
    assert load_adapter("shapes", height=32, width=64).latent_shape() == (4, 8, 16)
    with pytest.raises(
        ValueError, match=r"width 36 does not fit this model: use a multiple of 8 .*e\.g\. 32 "
    ):
        load_adapter("shapes", width=36)  # a multiple of the VAE factor alone is not enough
    with pytest.raises(
        ValueError, match=r"height 4 does not fit this model: use a multiple of 8 .*e\.g\. 8 "
    ):
        load_adapter("shapes", height=4)
    t = ad.encode(["a red circle"]).embeds.shape[1]
    assert t == ad.pipe.tokenizer.model_max_length + MAX_SEQUENCE_LENGTH


def test_flux_encodes_the_pipelines_default_512_t5_tokens(flux_dir):
    ad = load_adapter(flux_dir)
    assert ad.max_sequence_length == 512 and ad.encode(["a cat"]).embeds.shape[1] == 512


def test_init_noise_draws_each_latent_from_its_own_generator(sd3_dir):
    ad = load_adapter(sd3_dir)
    x = ad.init_noise([torch.Generator().manual_seed(i) for i in (3, 4)])
    for row, s in zip(x, (3, 4)):
        assert torch.equal(row, torch.randn(ad.latent_shape(), generator=torch.Generator().manual_seed(s)))


def test_lora_layers_scale_by_alpha_over_rank_and_the_checkpoint_records_them(sd3_dir, tmp_path):
    ad = load_adapter(sd3_dir)
    ad.add_lora(rank=2, alpha=6)
    scalings = [m.scaling["default"] for m in ad.transformer.modules() if hasattr(m, "scaling")]
    assert scalings and all(s == 3.0 for s in scalings)
    ad.save(tmp_path / "lora", base_model=str(sd3_dir))
    info = json.loads((tmp_path / "lora" / "imgalign_model.json").read_text())
    assert info == {
        "family": "sd3",
        "base_model": str(sd3_dir),
        "lora": {"rank": 2, "alpha": 6, "target_modules": ["to_k", "to_q", "to_v", "to_out.0"]},
    }


def test_bfloat16_text_conditioning_is_cached_in_float32(sd3_dir):
    c = load_adapter(sd3_dir, dtype=torch.bfloat16).encode(["a circle", "a square"])
    assert c.embeds.dtype == c.pooled.dtype == torch.float32


def test_sd3_dynamic_shifting_takes_the_non_square_image_sequence_length(sd3_dir):
    """With a dynamically shifted scheduler (μ from the image's token count), the σ schedule of an 8x12 image is
    the one the pipeline itself sets for that size (tokens = 8·12, not 8·8)."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    ad = load_adapter(sd3_dir, height=8, width=12)
    config = ad.pipe.scheduler.config
    ad.pipe.scheduler = FlowMatchEulerDiscreteScheduler.from_config(config, use_dynamic_shifting=True)
    ours = ad.sigmas(3)
    pipeline_sample(ad, ["a circle"], 3, 1.0, None, (8, 12))
    torch.testing.assert_close(ours, ad.pipe.scheduler.sigmas.float())


def test_sd3_dynamic_shifting_counts_tokens_of_patch_size_two(sd3_dir):
    """Real SD3 transformers use 2x2 patches: the shift μ comes from the token count (8/2)·(12/2) = 24, not the
    96 latent pixels (the tiny fixture's patch_size 1 cannot tell them apart). Checked by hand and against the
    pipeline's own schedule."""
    from diffusers import FlowMatchEulerDiscreteScheduler, StableDiffusion3Pipeline
    from diffusers.pipelines.stable_diffusion_3.pipeline_stable_diffusion_3 import calculate_shift

    from imgalign.trainers.testing import tiny_sd3_transformer

    base = load_adapter(sd3_dir).pipe
    transformer = tiny_sd3_transformer(8, patch_size=2)
    config = base.scheduler.config
    pipe = StableDiffusion3Pipeline(**{**base.components, "transformer": transformer})
    pipe.scheduler = FlowMatchEulerDiscreteScheduler.from_config(config, use_dynamic_shifting=True)
    ad = SD3Adapter(pipe, height=8, width=12)  # the tiny VAE's scale factor is 1: latents 8x12, tokens 4x6
    ours = ad.sigmas(3)
    hand = FlowMatchEulerDiscreteScheduler.from_config(config, use_dynamic_shifting=True)
    hand.set_timesteps(3, mu=calculate_shift(24, 256, 4096, 0.5, 1.15))  # the scheduler config's defaults
    torch.testing.assert_close(ours, hand.sigmas.float())
    pipeline_sample(ad, ["a circle"], 3, 1.0, None, (8, 12))
    torch.testing.assert_close(ours, ad.pipe.scheduler.sigmas.float())


def test_bfloat16_flux_timestep_is_rounded_as_the_pipeline_rounds_it(flux_dir, monkeypatch):
    """FluxPipeline passes t.to(dtype) / 1000 with t = 1000·σ: in bfloat16, σ = 0.75 -> t = 752 -> 0.75390625
    (rounding σ itself would give 0.75)."""
    ad = load_adapter(flux_dir, dtype=torch.bfloat16, max_sequence_length=77)
    seen = []
    real = ad.transformer.forward
    monkeypatch.setattr(ad.transformer, "forward", lambda **kw: seen.append(kw["timestep"]) or real(**kw))
    ad.velocity(ad.init_noise([torch.Generator().manual_seed(0)]), 0.75, ad.encode(["a cat"]), 3.5)
    assert seen[0].dtype == torch.bfloat16 and float(seen[0][0]) == 0.75390625


def test_flux_without_a_guidance_embedding_matches_the_pipeline(tmp_path):
    """A FLUX.1-schnell-like transformer (no guidance_embeds) gets no guidance input and samples as the pipeline."""
    ad = load_adapter(tiny_flux_pipeline(tmp_path, guidance_embeds=False), max_sequence_length=77)
    prompts = ["a photo of a cat", "a dog"]
    ours = ode_sample(ad, prompts, 2, 3.5, [torch.Generator().manual_seed(i) for i in range(2)])
    init = ad.init_noise([torch.Generator().manual_seed(i) for i in range(2)])
    ref = pipeline_sample(ad, prompts, 2, 3.5, init, (8, 8), max_sequence_length=77)
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-5)


def test_a_loaded_adapter_trains_nothing_until_lora_or_full_fine_tuning_and_lora_init_keeps_the_global_rng(
    sd3_dir,
):
    """Every weight starts frozen; add_lora trains exactly the LoRA weights, A drawn N(0, 1/r) ("gaussian", as
    Flow-GRPO) and B zero, from its own seed: the global RNG state is the same after add_lora as before."""
    ad = load_adapter(sd3_dir)
    assert ad.trainable_named_parameters() == []
    state = torch.get_rng_state()
    ad.add_lora(rank=2, alpha=4, init_seed=0)
    assert torch.equal(torch.get_rng_state(), state)
    a = torch.cat([p.flatten() for n, p in ad.trainable_named_parameters() if "lora_A" in n])
    b = torch.cat([p.flatten() for n, p in ad.trainable_named_parameters() if "lora_B" in n])
    assert a.numel() >= 100 and 0.4 < float(a.detach().std()) < 0.6 and torch.all(b == 0)


def test_full_fine_tuning_without_a_reference_keeps_no_copy(sd3_dir):
    ad = load_adapter(sd3_dir)
    ad.enable_full_finetune(keep_reference=False)
    assert ad.trainable_named_parameters() and ad._reference is None
    with pytest.raises(RuntimeError, match="no reference model"):
        with ad.reference():
            pass


def test_an_adapter_built_on_a_loaded_pipeline_casts_the_transformer_to_its_dtype(sd3_dir):
    ad = SD3Adapter(load_pipeline(sd3_dir), dtype=torch.bfloat16)
    assert ad.transformer.dtype == torch.bfloat16 and ad.pipe.vae.dtype == torch.float32


def test_bfloat16_flux_guidance_is_float32_as_the_pipeline_passes_it(flux_dir, monkeypatch):
    """FluxPipeline builds the guidance input in float32 whatever the transformer's dtype (4.3 is not a bfloat16)."""
    ad = load_adapter(flux_dir, dtype=torch.bfloat16, max_sequence_length=77)
    seen = []
    real = ad.transformer.forward
    monkeypatch.setattr(ad.transformer, "forward", lambda **kw: seen.append(kw["guidance"]) or real(**kw))
    ad.velocity(ad.init_noise([torch.Generator().manual_seed(0)]), 0.75, ad.encode(["a cat"]), 4.3)
    assert seen[0].dtype == torch.float32 and float(seen[0][0]) == pytest.approx(4.3, abs=1e-6)


def test_a_full_fine_tune_of_a_hub_id_base_saves_without_its_index(sd3_dir, tmp_path):
    """The base's model_index.json is copied only when the base is a folder; a Hub id base saves diffusers' own."""
    ad = load_adapter(sd3_dir)
    ad.enable_full_finetune(keep_reference=False)
    ad.save(tmp_path / "full", base_model="org/not-a-local-folder")
    assert (
        json.loads((tmp_path / "full" / "imgalign_model.json").read_text())["base_model"]
        == "org/not-a-local-folder"
    )
    assert (tmp_path / "full" / "model_index.json").is_file()


def test_cond_index_takes_the_same_rows_of_the_embeddings_and_the_pooled_vectors():
    from imgalign.adapters import Cond

    c = Cond(torch.arange(3.0).view(3, 1, 1).expand(3, 2, 4), torch.arange(3.0).view(3, 1).expand(3, 5))
    s = c.index([2, 0])
    assert s.embeds[:, 0, 0].tolist() == [2.0, 0.0] and s.pooled[:, 0].tolist() == [2.0, 0.0]


def test_an_adapter_freezes_the_text_encoders_and_the_vae_in_eval_mode(sd3_dir):
    """Also on a pipeline handed over in training mode (dropout off: an embedding is a function of the prompt)."""
    pipe = load_pipeline(sd3_dir)
    parts = (pipe.text_encoder, pipe.text_encoder_2, pipe.vae)
    for m in parts:
        m.train().requires_grad_(True)
    SD3Adapter(pipe)
    for m in parts:
        assert not m.training and not any(p.requires_grad for p in m.parameters())


def test_decode_casts_the_latents_to_the_vaes_dtype_and_keeps_no_graph(sd3_dir):
    """A pipeline loaded wholly in bfloat16 (its VAE too) decodes float32 latents; the images carry no graph."""
    ad = SD3Adapter(load_pipeline(sd3_dir, dtype=torch.bfloat16), dtype=torch.bfloat16)
    assert ad.pipe.vae.dtype == torch.bfloat16
    x = ad.init_noise([torch.Generator().manual_seed(0)]).requires_grad_()
    img = ad.decode(x)
    assert img.dtype == torch.float32 and img.shape == (1, 3, 8, 8) and not img.requires_grad


def test_a_lora_checkpoint_records_the_given_targets_and_saves_into_a_new_nested_folder(sd3_dir, tmp_path):
    ad = load_adapter(sd3_dir)
    ad.add_lora(rank=2, alpha=4, target_modules=["to_q", "to_v"])
    out = tmp_path / "checkpoints" / "step-000001"
    ad.save(out, base_model=str(sd3_dir))
    assert json.loads((out / "imgalign_model.json").read_text())["lora"]["target_modules"] == ["to_q", "to_v"]


def test_gradient_checkpointing_is_switched_on_in_the_transformer(sd3_dir):
    ad = load_adapter(sd3_dir)
    assert not ad.transformer.is_gradient_checkpointing
    ad.enable_gradient_checkpointing()
    assert ad.transformer.is_gradient_checkpointing


def test_flux_default_size_is_the_vaes_image_sample_size(flux_dir):
    """FLUX transformers have no sample_size: the default image side is the VAE's sample_size (in pixels, not in
    latents), here with a VAE that downsamples by 2."""
    from diffusers import AutoencoderKL

    pipe = load_pipeline(flux_dir)
    pipe.vae = AutoencoderKL(
        sample_size=16,
        block_out_channels=(4, 4),
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
        layers_per_block=1,
        latent_channels=1,
        norm_num_groups=1,
    )
    ad = FluxAdapter(pipe, max_sequence_length=77)
    assert ad.vae_scale_factor == 2 and (ad.height, ad.width) == (16, 16)


def test_the_full_fine_tuning_reference_is_a_frozen_copy_in_eval_mode(sd3_dir):
    ad = load_adapter(sd3_dir)
    ad.transformer.train()  # a trainer may have switched it to training mode; the reference is still eval
    ad.enable_full_finetune(keep_reference=True)
    with ad.reference() as ref:
        assert ref is not ad.transformer and not ref.training
        assert not any(p.requires_grad for p in ref.parameters())


def test_trainable_patterns_that_match_nothing_name_the_trainable_weights(sd3_dir):
    ad = load_adapter(sd3_dir)
    ad.add_lora(rank=2, alpha=2)
    n = len(ad.trainable_named_parameters())
    first = ad.trainable_named_parameters()[0][0]
    with pytest.raises(
        ValueError, match=rf"matches none of the {n} trainable parameters \(e.g. {re.escape(first)}, "
    ):
        ad.restrict_trainable(["no_such_module"])
    assert ad.restrict_trainable(["lora_A"]) == [m for m, _ in ad.trainable_named_parameters()]


def test_velocity_takes_a_noise_level_per_sample(sd3_dir):
    ad = load_adapter(sd3_dir)
    x = ad.init_noise([torch.Generator().manual_seed(i) for i in range(2)])
    cond = ad.encode(["a", "b"])
    with torch.no_grad():
        both = ad.velocity(x, torch.tensor([0.3, 0.7]), cond, 3.0)
        for i, s in enumerate((0.3, 0.7)):
            torch.testing.assert_close(both[i : i + 1], ad.velocity(x[i : i + 1], s, cond.index([i]), 3.0))


def test_linear_module_names_are_the_endings_of_linear_layers_only():
    from imgalign.adapters import linear_module_names

    nn = torch.nn
    m = nn.ModuleDict(
        {
            "attn": nn.ModuleDict(
                {"to_q": nn.Linear(2, 2), "to_out": nn.ModuleList([nn.Linear(2, 2), nn.Dropout()])}
            ),
            "norm": nn.LayerNorm(2),
            "proj": nn.Linear(2, 2),
        }
    )
    assert linear_module_names(m) == ["to_out.0", "to_q", "proj"]  # the default LoRA targets first


def test_velocity_counts_transformer_evaluations_per_sample_with_cfg_as_two(sd3_dir, flux_dir):
    """nfe_count (read by the trainer as perf/nfe_train) grows by B per plain call and 2·B per CFG call (SD3); a
    guidance-distilled FLUX model runs one forward per sample whatever the scale."""
    ad = load_adapter(sd3_dir)
    x = ad.init_noise([torch.Generator().manual_seed(i) for i in range(3)])
    cond = ad.encode(["a", "b", "c"])
    with torch.no_grad():
        ad.velocity(x, 0.5, cond, 1.0)
        assert ad.nfe_count == 3
        ad.velocity(x, 0.5, cond, 3.0)
        assert ad.nfe_count == 3 + 6
    flux = load_adapter(flux_dir, max_sequence_length=77)
    with torch.no_grad():
        flux.velocity(flux.init_noise([torch.Generator()] * 2), 0.5, flux.encode(["a", "b"]), 3.5)
    assert flux.nfe_count == 2


def test_a_missing_lora_target_is_the_only_problem_named_when_peft_was_not_asked(sd3_dir):
    """Before peft runs, only the names that select nothing are wrong: 'proj' also selects a Conv2d (the patch
    embedding), which peft takes, so the message must not call it a problem."""
    ad = load_adapter(sd3_dir)
    with pytest.raises(ValueError) as e:
        ad.add_lora(rank=2, alpha=4, target_modules=["proj", "no_such"])
    assert str(e.value).startswith("model.lora_targets ['proj', 'no_such']: 'no_such' names no module; give ")


def test_peft_refusing_linear_targets_gives_its_own_reason(sd3_dir, monkeypatch):
    """When peft refuses targets that are all Linear layers (so no module type to blame), its first line is the
    reason given, cut to 200 characters."""
    ad = load_adapter(sd3_dir)

    def refuse(cfg):
        raise ValueError("peft says no\nsecond line")

    monkeypatch.setattr(ad.transformer, "add_adapter", refuse)
    with pytest.raises(ValueError, match=r"^model.lora_targets \['to_q'\]: peft says no; give names") as e:
        ad.add_lora(rank=2, alpha=4, target_modules=["to_q"])
    assert "second line" not in str(e.value)


def test_a_second_lora_is_refused_with_a_clear_message(sd3_dir):
    """add_lora on an adapter that already has one: peft refuses the second 'default' adapter, and the modules it
    wrapped are not Linear any more, which read as "'to_k' names a Linear, not a Linear layer"; the refusal says
    what happened instead, and the first LoRA stays as it was."""
    ad = load_adapter(sd3_dir)
    ad.add_lora(rank=2, alpha=4)
    before = {n: p.clone() for n, p in ad.trainable_named_parameters()}
    with pytest.raises(ValueError, match=r"^this model already has a LoRA \(rank 2\); ") as e:
        ad.add_lora(rank=4, alpha=8)
    assert "not a Linear layer" not in str(e.value)
    assert ad.lora_config == {"rank": 2, "alpha": 4, "target_modules": ["to_k", "to_q", "to_v", "to_out.0"]}
    after = dict(ad.trainable_named_parameters())
    assert after.keys() == before.keys() and all(torch.equal(after[n], p) for n, p in before.items())

"""Units of the shapes text-to-image pretraining (:mod:`imgalign.pretrain.t2i`) that test_t2i.py left unchecked
(mutation round 13): small and fast, no pretraining run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_t2i import TINY_T2I

from imgalign.pretrain import t2i


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def tiny(**kw) -> t2i.Config:
    return t2i.Config(**{**TINY_T2I, **kw})


def test_a_negative_or_too_large_seed_is_refused():
    """seed=-1 aliased another seed silently (torch wraps it modulo 2**64) instead of being refused."""
    for bad in (-1, 2**63):
        with pytest.raises(ValueError, match=r"^seed must be an integer from 0 to 2\*\*63 - 1"):
            tiny(seed=bad).validate()
    tiny(seed=2**63 - 1).validate()


def _config_only_pipeline(root, scheduler: dict) -> None:
    """The JSON configs folder_architecture reads (no weights), of tiny()'s architecture."""
    configs = {
        "model_index.json": {"_class_name": "StableDiffusion3Pipeline", "text_encoder_3": [None, None]},
        "transformer/config.json": {"num_layers": 1, "num_attention_heads": 1, "patch_size": 2},
        "text_encoder/config.json": {
            "hidden_size": 16,
            "num_hidden_layers": 2,
            "max_position_embeddings": 12,
        },
        "vae/config.json": {"block_out_channels": [8, 8, 8], "norm_num_groups": 2},
        "scheduler/scheduler_config.json": scheduler,
    }
    for name, cfg in configs.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(json.dumps(cfg))


def test_a_scheduler_config_without_a_shift_has_diffusers_default_shift_of_1(tmp_path):
    """FlowMatchEulerDiscreteScheduler's shift defaults to 1.0: a model whose scheduler config omits it was built
    with shift 1, and a config asking for another shift must be refused."""
    _config_only_pipeline(tmp_path, {"_class_name": "FlowMatchEulerDiscreteScheduler"})
    arch = t2i.folder_architecture(tmp_path)
    assert arch["shift"] == 1.0 and arch["heads"] == 1 and arch["vae_channels"] == [8, 8, 8]
    _config_only_pipeline(tmp_path, {"_class_name": "FlowMatchEulerDiscreteScheduler", "shift": 3.0})
    assert t2i.folder_architecture(tmp_path)["shift"] == 3.0


def _same_settings(built: dict, shipped: dict) -> dict:
    """The settings of `shipped` (a saved component config) that `built` gives otherwise."""
    skip = {"architectures", "dtype", "transformers_version"}
    return {
        k: (built.get(k), v)
        for k, v in shipped.items()
        if not k.startswith("_")
        and k not in skip
        and built.get(k) != (list(v) if isinstance(v, tuple) else v)
    }


def test_the_builders_with_the_default_config_rebuild_the_shipped_architecture(tmp_path):
    """The shipped model was pretrained with the defaults (its card's command): each builder must give its
    component's saved config setting for setting. The checks from init_from read only a few settings (a second
    block per autoencoder level or 4 text attention heads passed them)."""
    from imgalign.hub import resolve
    from imgalign.pretrain.tokenizer import save_tokenizer

    shipped = Path(resolve("shapes"))
    cfg = t2i.Config()
    tok = save_tokenizer(tmp_path / "tok", cfg.max_length)

    def saved(name: str, fname: str = "config.json") -> dict:
        return json.loads((shipped / name / fname).read_text())

    def norm(config) -> dict:
        return json.loads(json.dumps(dict(config), default=list))

    assert _same_settings(norm(t2i.build_vae(cfg).config), saved("vae")) == {}
    assert _same_settings(norm(t2i.build_transformer(cfg).config), saved("transformer")) == {}
    assert _same_settings(t2i.build_text_encoder(cfg, tok, 1).config.to_dict(), saved("text_encoder")) == {}
    sch = saved("scheduler", "scheduler_config.json")
    assert _same_settings(norm(t2i.build_scheduler(cfg).config), sch) == {}
    assert t2i.build_scheduler(t2i.Config(shift=3.0)).config.shift == 3.0


@pytest.fixture(scope="module")
def renders() -> torch.Tensor:
    images, _ = t2i.render_dataset(16, 0, False)
    return images


def test_the_autoencoder_trains_without_weight_decay_and_a_folder_without_weights_is_trained_again(
    tmp_path, renders
):
    """AdamW's decay is off in the autoencoder stage (its optimizer state says 0.0, not the transformer's
    weight_decay); and a work/vae folder holding a config but no weights is no finished autoencoder: it is
    trained again instead of loaded (from_pretrained failed on it)."""
    cfg = tiny(vae_steps=1, weight_decay=0.05)
    (tmp_path / "vae").mkdir()
    (tmp_path / "vae" / "config.json").write_text(json.dumps(dict(t2i.build_vae(cfg).config), default=list))
    torch.manual_seed(0)
    t2i.train_vae(cfg, tmp_path, renders, False)
    st = t2i.load_state(tmp_path / "vae-ckpt.pt")
    assert st["step"] == 1
    assert st["opt"]["param_groups"][0]["weight_decay"] == 0.0
    assert list((tmp_path / "vae").glob("*.safetensors"))


def test_the_autoencoder_decodes_a_sample_of_its_posterior_not_its_mean(tmp_path, renders, monkeypatch):
    """The reconstruction loss is taken on z = mean + std * noise (the KL term's posterior), not on the mean; with
    decoder noise and latent mixing off the decoder sees exactly that sample."""
    seen: dict = {}
    real_build = t2i.build_vae

    def build(cfg):
        vae = real_build(cfg)
        encode, decode = vae.encode, vae.decode
        vae.encode = lambda x: (seen.setdefault("post", out := encode(x)), out)[1]  # the first: the step's
        vae.decode = lambda z: (seen.setdefault("z", z), decode(z))[1]
        return vae

    monkeypatch.setattr(t2i, "build_vae", build)
    t2i.train_vae(tiny(vae_steps=1, vae_mix=0.0, vae_noise=0.0), tmp_path, renders, False)
    post = seen["post"].latent_dist
    noise = (seen["z"] - post.mean) / post.std
    assert noise.abs().min() > 0
    assert noise.mean().abs() < 0.2 and 0.8 < noise.std() < 1.2


def test_pretrain_uses_its_threads_t5_tokens_and_eval_seed_and_records_the_time_at_each_checkpoint(
    tmp_path, monkeypatch
):
    """One tiny run, stopped in its third step: torch ran with cfg.threads; the prompts were encoded with
    cfg.t5_tokens zero 'T5' tokens after the 12 CLIP ones (0 here: 12 in all); the quick evaluations drew seed 0 as
    the eval suite does; and the checkpoint of step 2 wrote the run time too, so a kill keeps it for the resume."""
    threads, emb_len, evals = [], [], []
    real_threads, real_loss = torch.set_num_threads, t2i.velocity_loss
    monkeypatch.setattr(torch, "set_num_threads", lambda n: threads.append(n) or real_threads(1))

    def loss(transformer, xt, v, t, emb, *rest):
        emb_len.append(emb.shape[1])
        if len(emb_len) == 3:
            raise KeyboardInterrupt
        return real_loss(transformer, xt, v, t, emb, *rest)

    monkeypatch.setattr(t2i, "velocity_loss", loss)
    monkeypatch.setattr(t2i, "quick_eval", lambda pipe, metas, n, seed: evals.append((n, seed)) or (0.5, {}))
    cfg = tiny(threads=2, t5_tokens=0, steps=3, ckpt_every=2, eval_every=1, eval_prompts=1)
    with pytest.raises(KeyboardInterrupt):
        t2i.pretrain(cfg, tmp_path, progress=False)
    assert threads[0] == 2
    assert emb_len == [12, 12, 12]
    assert evals == [(1, 0), (1, 0)]
    assert json.loads((tmp_path / t2i.WORK / "timing.json").read_text())["seconds"] > 0


def test_the_card_gives_the_autoencoder_settings_and_the_run_times_in_minutes(tmp_path):
    metrics = {"params": 10.0, "train_seconds": 150.0, "total_seconds": 270.0}
    t2i.write_card(tmp_path, tiny(vae_mix=0.75, vae_noise=0.25, threads=2), metrics, [])
    card = (tmp_path / "README.md").read_text()
    assert "latent-mixing weight 0.75, decoder noise 0.25; transformer" in card
    assert (
        "- run time: 2 min to the shipped weights, 4 min with the final evaluation (wall clock, 2 torch thread(s)"
        in card
    )


def test_pretrain_ships_the_pipeline_in_shards_of_at_most_4_mb(tmp_path, monkeypatch):
    """Shards of at most 4 MB keep every shipped file small for git."""
    from diffusers import StableDiffusion3Pipeline

    calls, real_save = [], StableDiffusion3Pipeline.save_pretrained

    def save(self, folder, **kw):
        calls.append(kw)
        return real_save(self, folder, **kw)

    monkeypatch.setattr(StableDiffusion3Pipeline, "save_pretrained", save)
    t2i.pretrain(tiny(steps=1), tmp_path, progress=False)
    assert calls == [{"safe_serialization": True, "max_shard_size": "4MB"}]

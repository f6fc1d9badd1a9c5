"""The shapes text-to-image model: tokenizer, pretraining maths, resumable pretraining, sampling helpers."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from imgalign.pretrain import t2i
from imgalign.pretrain.tokenizer import save_tokenizer, shapes_words


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)


TINY_T2I = dict(
    n_images=16,
    vae_channels=[8, 8, 8],
    vae_steps=2,
    vae_batch=4,
    text_width=16,
    text_layers=2,
    layers=1,
    heads=1,
    steps=4,
    batch_size=4,
    warmup=1,
    ckpt_every=2,
    eval_every=0,
    final_eval_images=0,
)


def tiny_config(**kw) -> t2i.Config:
    return t2i.Config(**{**TINY_T2I, **kw})


@pytest.fixture(scope="module")
def tiny_pipeline_dir(tmp_path_factory) -> Path:
    """A randomly initialised pipeline with the shipped architecture, saved with save_pretrained."""
    cfg = tiny_config()
    d = tmp_path_factory.mktemp("tiny")
    tok = save_tokenizer(d / "tok", cfg.max_length)
    torch.manual_seed(0)
    pipe = t2i.make_pipeline(
        t2i.build_vae(cfg),
        t2i.build_transformer(cfg),
        t2i.build_text_encoder(cfg, tok, 1),
        t2i.build_text_encoder(cfg, tok, 2),
        tok,
        tok,
        t2i.build_scheduler(cfg),
    )
    pipe.save_pretrained(d / "pipe")
    return d / "pipe"


# ---- tokenizer ------------------------------------------------------------------------------------------------
def test_tokenizer_loads_offline_and_maps_shapes_words_to_single_tokens(tmp_path):
    from transformers import CLIPTokenizer

    save_tokenizer(tmp_path / "tokenizer", 12)
    tok = CLIPTokenizer.from_pretrained(tmp_path / "tokenizer")
    assert tok.model_max_length == 12
    for w in shapes_words():
        ids = tok(w, add_special_tokens=False).input_ids
        assert len(ids) == 1, (w, tok.convert_ids_to_tokens(ids))
        assert tok.convert_ids_to_tokens(ids) == [w + "</w>"]
    # an unknown word still tokenises, into pieces (no unknown token, no crash)
    ids = tok("a zebra", add_special_tokens=False).input_ids
    assert len(ids) > 2 and tok.unk_token_id not in ids
    enc = tok("a photo of a red circle and a blue square", padding="max_length", max_length=12).input_ids
    assert enc[0] == tok.bos_token_id and enc[11] == tok.eos_token_id and len(enc) == 12


def test_unknown_words_strip_punctuation_and_case():
    from imgalign.pretrain.tokenizer import unknown_words

    assert unknown_words("A photo of a Red circle.") == []
    assert unknown_words("a photo of a zebra!") == ["zebra"]
    assert unknown_words("a photo - of a circle ...") == []  # a bare punctuation mark is not a word


def test_sampling_warns_only_about_words_outside_the_vocabulary_whatever_their_case_and_punctuation(caplog):
    from types import SimpleNamespace

    from imgalign.sampling import warn_unknown_words

    vocab = {f"{w}</w>": i for i, w in enumerate(["a", "photo", "of", "red", "circle"])}
    pipe = SimpleNamespace(tokenizer=SimpleNamespace(get_vocab=lambda: vocab))
    with caplog.at_level(logging.WARNING, logger="imgalign.sampling"):
        warn_unknown_words(pipe, ["A Photo of a RED circle.", "a (red) zebra!"])
    assert caplog.text.rstrip().endswith("never learned): zebra")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="imgalign.sampling"):
        warn_unknown_words(pipe, ["a red circle", "A photo of a circle.", "a photo . of a circle ..."])
    assert caplog.text == ""  # every word known (a bare punctuation mark is no word): no warning at all


def test_the_vocabulary_ids_are_contiguous():
    from imgalign.pretrain.tokenizer import build_vocab

    vocab, merges = build_vocab(tuple(shapes_words()))
    assert sorted(vocab.values()) == list(range(len(vocab)))
    assert len(merges) == len(set(merges))


def test_the_vocabulary_covers_every_eval_prompt_and_merges_txt_keeps_its_header(tmp_path):
    """merges.txt readers skip the first line: without the "#version" header the first merge would be lost."""
    from imgalign.pretrain.tokenizer import build_vocab, unknown_words
    from imgalign.prompts.shapes import build_eval_set

    assert [p for p in (s.prompt() for s in build_eval_set()) if unknown_words(p)] == []  # plurals too
    save_tokenizer(tmp_path / "tok", 12)
    lines = (tmp_path / "tok" / "merges.txt").read_text().splitlines()
    _, merges = build_vocab(tuple(shapes_words()))
    assert lines[0] == "#version: 0.2" and [tuple(line.split()) for line in lines[1:]] == merges


def test_the_tokenizer_folder_holds_the_standard_vocab_json_of_the_vocabulary(tmp_path):
    """vocab.json is written beside tokenizer.json (transformers' save_pretrained writes only the latter), for the
    readers that look for the slow-tokenizer files."""
    import json

    from imgalign.pretrain.tokenizer import build_vocab

    save_tokenizer(tmp_path / "tok", 12)
    vocab, _ = build_vocab(tuple(shapes_words()))
    assert json.loads((tmp_path / "tok" / "vocab.json").read_text()) == vocab


# ---- pure maths -----------------------------------------------------------------------------------------------
def test_flow_matching_pair_hand_values():
    x0 = torch.tensor([2.0]).view(1, 1, 1, 1)
    eps = torch.tensor([-1.0]).view(1, 1, 1, 1)
    xt, v = t2i.flow_matching_pair(x0, eps, torch.tensor([0.25]))
    assert xt.item() == pytest.approx(0.75 * 2 + 0.25 * -1)  # 1.25
    assert v.item() == pytest.approx(-3.0)
    # the straight path: x_t + (1 - t) * (-v) ... reaches x0 at t=0 and eps at t=1
    x1, _ = t2i.flow_matching_pair(x0, eps, torch.tensor([1.0]))
    assert x1.item() == pytest.approx(-1.0)


class _SpyTransformer:
    """Returns a fixed velocity and records what it was called with."""

    def __init__(self, pred: torch.Tensor):
        self.pred, self.calls = pred, []

    def __call__(self, **kw):
        self.calls.append(kw)
        return type("Out", (), {"sample": self.pred})()


def test_velocity_loss_gives_the_timestep_in_thousandths_and_is_zero_at_the_target():
    g = torch.Generator().manual_seed(0)
    xt, v = torch.randn(3, 4, 2, 2, generator=g), torch.randn(3, 4, 2, 2, generator=g)
    t = torch.tensor([0.1, 0.5, 0.8])
    spy = _SpyTransformer(v.clone())
    loss = t2i.velocity_loss(spy, xt, v, t, "emb", "pooled", bf16=False)
    assert loss.item() == 0.0  # predicting the velocity target exactly costs nothing
    (call,) = spy.calls
    assert call["hidden_states"] is xt and call["encoder_hidden_states"] == "emb"
    assert call["pooled_projections"] == "pooled"
    torch.testing.assert_close(call["timestep"], torch.tensor([100.0, 500.0, 800.0]))  # t=1 is pure noise
    loss0 = t2i.velocity_loss(_SpyTransformer(torch.zeros_like(v)), xt, v, t, "emb", "pooled", bf16=False)
    assert loss0.item() == pytest.approx((v**2).mean().item())


def test_training_batch_pairs_each_prompt_with_its_own_latent():
    n = 10
    lat_mean = torch.arange(n, dtype=torch.float32).view(n, 1, 1, 1).expand(n, 4, 2, 2).contiguous()
    prompts = [f"prompt {i}" for i in range(n)]
    cfg = tiny_config(batch_size=16, cfg_dropout=0.3)
    batch_prompts, xt, v, t = t2i.training_batch(
        lat_mean, torch.zeros_like(lat_mean), prompts, cfg, torch.Generator().manual_seed(0)
    )
    assert len(batch_prompts) == 16 and xt.shape == v.shape == (16, 4, 2, 2) and t.shape == (16,)
    x0 = xt - t.view(-1, 1, 1, 1) * v  # x_t = (1-t) x0 + t eps, v = eps - x0
    kept = [(p, x) for p, x in zip(batch_prompts, x0) if p]
    assert 4 <= len(kept) < 16 and len({p for p, _ in kept}) > 3  # some dropped, several distinct images
    for p, x in kept:
        torch.testing.assert_close(x, torch.full_like(x, float(p.split()[1])), atol=1e-4, rtol=0)


def test_training_batch_drops_prompts_to_the_empty_prompt_with_probability_cfg_dropout():
    n, b = 4, 4000
    lat = torch.zeros(n, 4, 2, 2)
    prompts = [f"prompt {i}" for i in range(n)]
    for p in (0.0, 0.25):
        cfg = tiny_config(batch_size=b, cfg_dropout=p)
        batch_prompts, *_ = t2i.training_batch(lat, lat, prompts, cfg, torch.Generator().manual_seed(0))
        dropped = sum(q == "" for q in batch_prompts) / b
        assert dropped == pytest.approx(p, abs=0.03), p  # binomial sd at 0.25: 0.007


def test_recon_loss_weights_object_pixels_fg_weight_times_the_background():
    from imgalign.shapes import BACKGROUND

    bg = torch.tensor(BACKGROUND, dtype=torch.float32) / 127.5 - 1
    near = bg + 1 / 127.5  # one uint8 step off the background (anti-aliasing): still background
    obj = torch.tensor([1.0, -1.0, -1.0])
    x = torch.stack([bg, near, obj], 1).view(1, 3, 1, 3)  # (B, 3, H, W): pixels bg, near-bg, object
    rec = x.clone()
    rec[..., 0] += 0.5  # only the background pixel is wrong: |e| + e^2 = 0.75 per channel
    # weights 1, 1, 5: the weighted mean over pixels and channels is 0.75 * 1 / (1 + 1 + 5)
    assert t2i.recon_loss(rec, x, 5.0).item() == pytest.approx(0.75 / 7)
    rec = x.clone()
    rec[..., 2] -= 0.5  # only the object pixel is wrong
    assert t2i.recon_loss(rec, x, 5.0).item() == pytest.approx(0.75 * 5 / 7)
    assert t2i.recon_loss(rec, x, 1.0).item() == pytest.approx(0.75 / 3)  # unweighted: the plain mean


def test_logit_normal_median_and_lr_schedule():
    g = torch.Generator().manual_seed(0)
    t = t2i.logit_normal(20000, 0.0, 1.0, g)
    assert 0 < t.min() and t.max() < 1
    assert t.median().item() == pytest.approx(0.5, abs=0.02)
    assert t2i.lr_at(0, 1.0, 10, 100) == pytest.approx(0.1)
    assert t2i.lr_at(10, 1.0, 10, 100) == pytest.approx(1.0)
    assert t2i.lr_at(100, 1.0, 10, 100) == pytest.approx(0.1)
    mid = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5))
    assert t2i.lr_at(55, 1.0, 10, 100) == pytest.approx(mid)


def test_config_validation():
    with pytest.raises(ValueError, match="cfg_dropout"):
        tiny_config(cfg_dropout=1.5).validate()
    with pytest.raises(ValueError, match="max_length"):
        tiny_config(max_length=8).validate()
    for bad, msg in (({"ckpt_every": 0}, "ckpt_every must be at least 1"), ({"ema": 1.5}, "ema must be in")):
        with pytest.raises(ValueError, match=msg):
            tiny_config(**bad).validate()
    with pytest.raises(ValueError, match="vae_crop must be at most"):
        tiny_config(vae_crop=68).validate()
    with pytest.raises(ValueError, match="ema must be in"):
        tiny_config(ema=1.0).validate()  # decay 1 would never move the shipped weights
    tiny_config(vae_crop=64, ema=0.0).validate()  # the boundaries that are allowed
    with pytest.raises(ValueError, match="cfg_dropout"):
        tiny_config(cfg_dropout=1.0).validate()  # every prompt dropped: nothing conditional is learned
    with pytest.raises(ValueError, match="vae_crop a multiple of 4"):
        tiny_config(vae_crop=30).validate()
    # heads=0 was a convolution traceback after the training images were rendered; shift=-1 and logit_std=-1 trained
    for bad, msg in (
        ({"heads": 0}, "heads must be at least 1"),
        ({"layers": 0}, "layers must be at least 1"),
        ({"shift": -1.0}, "shift must be > 0"),
        ({"logit_std": 0.0}, "logit_std must be > 0"),
        ({"vae_groups": 0}, "vae_groups must be at least 1"),
        ({"vae_groups": 3}, r"vae_channels \[.*\] must be positive multiples of vae_groups \(3\)"),
        ({"t5_tokens": -1}, "t5_tokens must be at least 0"),
        ({"max_length": 11}, "max_length must be at least 12"),
        ({"vae_noise": -0.1}, "vae_noise must be >= 0"),
        ({"vae_channels": [8, 8]}, "vae_channels needs 3 entries"),
        ({"eval_prompts": 0}, "eval_prompts must be at least 1"),
    ):
        with pytest.raises(ValueError, match=msg):
            tiny_config(**bad).validate()
    # a learning rate of inf or 0 ran the whole pretraining (1 h 45 min) to NaN or to unchanged weights
    for name in ("lr", "vae_lr"):
        for bad in (0.0, -1e-3, math.inf):
            with pytest.raises(
                ValueError, match=rf"^{name} must be > 0 and finite \(got {bad}\); set it with --set"
            ):
                tiny_config(**{name: bad}).validate()
    from imgalign.pretrain import clip, vlm

    for mod in (clip, vlm):
        mod.Config().validate()
        with pytest.raises(ValueError, match=r"^lr must be > 0 and finite \(got inf\)"):
            mod.Config(lr=math.inf).validate()


def test_logit_normal_spread_is_the_std_not_the_variance():
    g = torch.Generator().manual_seed(0)
    t = t2i.logit_normal(20000, 0.0, 2.0, g)
    # P(t < sigmoid(-2)) = P(N(0, 2^2) < -2) = P(Z < -1) = 0.159
    assert (t < torch.sigmoid(torch.tensor(-2.0))).float().mean().item() == pytest.approx(0.159, abs=0.01)


def test_eval_subset_spreads_over_every_task():
    from imgalign.shapes import TASKS

    metas = t2i.eval_subset(12)
    assert len(metas) == 12
    assert {m["tag"] for m in metas} == set(TASKS)


def test_an_sd3_pipeline_with_t5_is_not_a_shapes_architecture(tmp_path, tiny_pipeline_dir):
    import shutil

    d = tmp_path / "p"
    shutil.copytree(tiny_pipeline_dir, d)
    assert t2i.folder_architecture(d)["layers"] == 1
    index = json.loads((d / "model_index.json").read_text())
    index["text_encoder_3"] = ["transformers", "T5EncoderModel"]
    (d / "model_index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match="not a shapes-architecture pipeline"):
        t2i.folder_architecture(d)
    # another pipeline class is refused too, with or without T5
    index.update(_class_name="StableDiffusionXLPipeline", text_encoder_3=[None, None])
    (d / "model_index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match="not a shapes-architecture pipeline"):
        t2i.folder_architecture(d)


def test_decoder_noise_is_relative_to_each_channel_and_off_at_zero():
    g = torch.Generator().manual_seed(0)
    mean = torch.randn(512, 2, 4, 4, generator=g) * torch.tensor([1.0, 10.0]).view(1, 2, 1, 1)
    n = t2i.decoder_noise(mean, 0.5, g)
    assert n.shape == mean.shape
    ratio = n[:, 1].std() / n[:, 0].std()
    assert 8.5 < ratio < 11.5  # follows the channel's spread
    # per-sample std U(0, 0.5) x channel std: E[rel^2] = 0.25 / 3, so the overall std is sqrt(1/12) ~ 0.289
    assert abs(n[:, 0].std().item() - (1 / 12) ** 0.5) < 0.03
    assert t2i.decoder_noise(mean, 0.0, g).abs().max() == 0
    with pytest.raises(ValueError, match="vae_mix"):
        tiny_config(vae_mix=-1.0).validate()


def test_autoencoder_linearity_and_noise_options_change_training(tmp_path):
    from safetensors.torch import load_file

    t2i.pretrain(tiny_config(steps=1, vae_mix=0.0, vae_noise=0.0), tmp_path / "plain", progress=False)
    t2i.pretrain(tiny_config(steps=1, vae_mix=1.0, vae_noise=0.5), tmp_path / "mix", progress=False)
    w = "vae/diffusion_pytorch_model.safetensors"
    a = load_file(tmp_path / "plain" / t2i.FOLDER / w)
    b = load_file(tmp_path / "mix" / t2i.FOLDER / w)
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_pretrain_save_does_not_warn_about_the_absent_t5(tmp_path, diffusers_save_log):
    t2i.pretrain(tiny_config(steps=1), tmp_path, progress=False)
    assert not [r for r in diffusers_save_log if "cannot be saved" in r.getMessage()]
    assert (tmp_path / t2i.FOLDER / "model_index.json").is_file()


# ---- resumable pretraining ------------------------------------------------------------------------------------
def test_pretrain_resumes_after_kill_and_matches_uninterrupted(tmp_path, monkeypatch):
    from safetensors.torch import load_file

    cfg = tiny_config()
    # one loss row over all 4 steps, so that the kill after step 2 falls inside its window
    monkeypatch.setattr(t2i, "LOSS_LOG_EVERY", 4)
    ref = t2i.pretrain(cfg, tmp_path / "ref", progress=False)
    assert ref["params"] > 0

    calls = {"n": 0}
    real = t2i.flow_matching_pair

    def dies_at_step_3(*a):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # killed after the step-2 checkpoint
        return real(*a)

    monkeypatch.setattr(t2i, "flow_matching_pair", dies_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        t2i.pretrain(cfg, tmp_path / "run", progress=False)
    st = t2i.load_state(tmp_path / "run" / t2i.WORK / "t2i-ckpt.pt")
    assert st["step"] == 2
    assert not (tmp_path / "run" / t2i.FOLDER).exists()
    monkeypatch.setattr(t2i, "flow_matching_pair", real)
    t2i.pretrain(cfg, tmp_path / "run", progress=False)  # the same command again: continues from step 2
    st = t2i.load_state(tmp_path / "run" / t2i.WORK / "t2i-ckpt.pt")
    assert st["step"] == 4
    # the loss row's mean also counts the 2 steps before the kill: the running sum travels in the checkpoint
    loss_rows = [r for r in json.loads(st["log"]) if "loss" in r]
    ref_rows = json.loads(t2i.load_state(tmp_path / "ref" / t2i.WORK / "t2i-ckpt.pt")["log"])
    assert loss_rows == [r for r in ref_rows if "loss" in r] and [r["step"] for r in loss_rows] == [4]
    w = "transformer/diffusion_pytorch_model.safetensors"
    a = load_file(tmp_path / "ref" / t2i.FOLDER / w)
    b = load_file(tmp_path / "run" / t2i.FOLDER / w)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
    assert (tmp_path / "run" / t2i.FOLDER / "README.md").is_file()


def test_pretrain_ships_the_ema_weights_not_the_last_trained_ones(tmp_path):
    from safetensors.torch import load_file

    t2i.pretrain(tiny_config(), tmp_path, progress=False)
    st = t2i.load_state(tmp_path / t2i.WORK / "t2i-ckpt.pt")
    raw = st["models"][0]  # the transformer's trained weights at the last step
    shipped = load_file(tmp_path / t2i.FOLDER / "transformer/diffusion_pytorch_model.safetensors")
    shadow = dict(
        zip(
            [k for k, _ in t2i.build_transformer(tiny_config()).named_parameters()],
            st["ema"]["shadow_params"],
        )
    )
    assert shadow.keys() <= shipped.keys()
    for k, v in shadow.items():
        torch.testing.assert_close(shipped[k], v, rtol=0, atol=0)
    assert any(not torch.equal(shipped[k], raw[k]) for k in shadow)


def test_pretrain_refuses_a_changed_config_in_the_same_folder(tmp_path):
    t2i.pretrain(tiny_config(steps=2), tmp_path, progress=False)
    with pytest.raises(ValueError, match="steps"):
        t2i.pretrain(tiny_config(steps=3), tmp_path, progress=False)


def test_pretrain_continues_from_a_model(tmp_path, tiny_pipeline_dir):
    """init_from: the model's autoencoder and tokenizers ship unchanged, its transformer and text encoders train on."""
    from safetensors.torch import load_file

    out = tmp_path / "more"
    t2i.pretrain(tiny_config(steps=2, init_from=str(tiny_pipeline_dir)), out, progress=False)
    assert not (out / t2i.WORK / "vae").exists()  # no autoencoder stage
    src, new = tiny_pipeline_dir, out / t2i.FOLDER
    for part, same in (("vae", True), ("transformer", False), ("text_encoder", False)):
        a, b = (load_file(next((d / part).glob("*.safetensors"))) for d in (src, new))
        assert a.keys() == b.keys()
        changed = any(not torch.equal(a[k], b[k]) for k in a)
        assert changed is not same, part
    vocab = [json.loads((d / "tokenizer" / "tokenizer.json").read_text())["model"] for d in (src, new)]
    assert vocab[0] == vocab[1]
    assert "continued from" in (new / "README.md").read_text()


def test_the_card_command_names_the_settings_that_differ_from_the_defaults():
    """A card said '(defaults' for a model pretrained with --set overrides; its command now gives them, and they
    parse back to the same config."""
    import dataclasses
    import re
    import shlex

    from imgalign.config import load_config
    from imgalign.pretrain import card_command

    cfg = dataclasses.replace(
        t2i.Config(), steps=3, vae_channels=[4, 8, 16], bf16=True, init_from="my runs/t2i"
    )
    card = card_command(cfg, "t2i")
    assert "(defaults" not in card
    # as a shell splits the command (an init_from folder with a space was two words)
    words = shlex.split(re.fullmatch(r"`(.+)` \(.*", card).group(1))
    sets = [w for prev, w in zip(words, words[1:]) if prev == "--set"]
    assert sets == ["init_from=my runs/t2i", "bf16=True", "vae_channels=[4,8,16]", "steps=3"]
    assert load_config(t2i.Config, None, sets) == cfg
    assert "(defaults" in card_command(t2i.Config(), "t2i")


def test_init_from_is_checked_before_any_model_loads(tmp_path, tiny_pipeline_dir, monkeypatch):
    from imgalign.pipelines import IncompleteModelError

    def no_render(*a, **k):
        raise AssertionError("rendered before the check")

    monkeypatch.setattr(t2i, "render_dataset", no_render)
    with pytest.raises(ValueError, match=r"layers: model 1, config 2.*--set layers=1") as e:
        t2i.pretrain(
            tiny_config(layers=2, heads=2, init_from=str(tiny_pipeline_dir)), tmp_path, progress=False
        )
    assert "heads: model 1, config 2" in str(e.value)
    with pytest.raises(IncompleteModelError, match="init_from=.*nowhere"):
        t2i.pretrain(tiny_config(init_from=str(tmp_path / "nowhere")), tmp_path / "a", progress=False)
    # the embedded model's architecture is the default config's
    assert t2i.check_init_from(t2i.Config(init_from="shapes")) is not None
    with pytest.raises(ValueError, match="text_width: model 64, config 16"):
        t2i.check_init_from(tiny_config(init_from="shapes"))


# ---- sampling -------------------------------------------------------------------------------------------------
def test_load_and_generate_batch_independent(tiny_pipeline_dir):
    from diffusers import StableDiffusion3Pipeline

    from imgalign.pipelines import load_pipeline
    from imgalign.sampling import generate

    pipe = load_pipeline(tiny_pipeline_dir)
    assert isinstance(pipe, StableDiffusion3Pipeline)
    prompts = ["a photo of a red circle", "a photo of two squares", "a photo of a cross above a triangle"]
    together = generate(pipe, prompts, [1, 2, 3], num_inference_steps=2, batch_size=3)
    alone = generate(pipe, prompts, [1, 2, 3], num_inference_steps=2, batch_size=1)
    assert [im.size for im in together] == [(64, 64)] * 3
    for x, y in zip(together, alone):
        assert np.abs(np.asarray(x, dtype=int) - np.asarray(y, dtype=int)).max() <= 2
    other_seed = generate(pipe, prompts[:1], [9], num_inference_steps=2)[0]
    assert np.abs(np.asarray(other_seed, dtype=int) - np.asarray(together[0], dtype=int)).max() > 2


def test_unknown_words_warn_and_bad_size_raises(tiny_pipeline_dir, caplog):
    from imgalign.pipelines import load_pipeline
    from imgalign.sampling import generate, generate_images

    pipe = load_pipeline(tiny_pipeline_dir)
    with caplog.at_level(logging.WARNING, logger="imgalign.sampling"):
        (img,) = generate(pipe, ["a photo of a purple zebra"], [0], num_inference_steps=1)
    assert "zebra" in caplog.text and "purple" not in caplog.text.split("vocabulary")[-1]
    assert img.size == (64, 64)
    (img,) = generate(pipe, ["a photo of a circle"], [0], num_inference_steps=1, height=64, width=32)
    assert img.size == (32, 64)  # PIL: (width, height)
    with pytest.raises(ValueError, match=r"height=72 .*\(trained at 64\)"):
        generate(pipe, ["a photo of a circle"], [0], height=72, width=64)
    with pytest.raises(ValueError, match=r"height=72 "):
        generate_images(pipe, ["a photo of a circle"], [0], steps=1, size=72)
    with pytest.raises(ValueError, match="width=128"):
        generate(pipe, ["a photo of a circle"], [0], height=64, width=128)
    with pytest.raises(ValueError, match="one seed per prompt"):
        generate(pipe, ["a photo of a circle"], [0, 1])


def test_missing_or_incomplete_model_folder(tmp_path, tiny_pipeline_dir):
    import shutil

    from imgalign.pipelines import IncompleteModelError, load_pipeline

    with pytest.raises(IncompleteModelError, match="does not exist"):
        load_pipeline(tmp_path / "nope")
    broken = tmp_path / "broken"
    shutil.copytree(tiny_pipeline_dir, broken)
    (broken / "transformer" / "diffusion_pytorch_model.safetensors").unlink()
    shutil.rmtree(broken / "tokenizer_2")
    for f in (broken / "scheduler").iterdir():  # a component folder left empty is missing too
        f.unlink()
    with pytest.raises(IncompleteModelError, match=r"transformer/ weights.*|tokenizer_2/") as e:
        load_pipeline(broken)
    assert "transformer" in str(e.value) and "tokenizer_2" in str(e.value) and "scheduler/" in str(e.value)
    assert "recreate it" in str(e.value)
    (broken / "trainer_state").mkdir()  # a training checkpoint: the advice is about the run, not pretraining
    with pytest.raises(IncompleteModelError, match="another checkpoint of the run"):
        load_pipeline(broken)
    run = tmp_path / "run"
    (run / "checkpoints" / "step-000004").mkdir(parents=True)
    with pytest.raises(IncompleteModelError, match=r"a training run folder.*checkpoints/step-000004"):
        load_pipeline(run)
    (broken / "model_index.json").unlink()
    with pytest.raises(IncompleteModelError, match="model_index.json"):
        load_pipeline(broken)


def test_fold_latent_normalisation_standardises_latents_and_keeps_the_decoder():
    cfg = tiny_config()
    torch.manual_seed(0)
    vae = t2i.build_vae(cfg).eval()
    x = torch.rand(6, 3, 64, 64) * 2 - 1
    with torch.no_grad():
        post0 = vae.encode(x).latent_dist
        z = post0.mean
        before = vae.decode(z).sample
    mu, sigma = z.mean((0, 2, 3)), z.std((0, 2, 3))
    t2i.fold_latent_normalisation(vae, mu, sigma)
    with torch.no_grad():
        post = vae.encode(x).latent_dist
        z2 = post.mean
        after = vae.decode(z2).sample
    torch.testing.assert_close(z2, (z - mu.view(1, -1, 1, 1)) / sigma.view(1, -1, 1, 1), atol=1e-5, rtol=1e-4)
    # the log-variance rows: the posterior std is divided by sigma too (log var - 2 log sigma)
    torch.testing.assert_close(post.std, post0.std / sigma.view(1, -1, 1, 1), atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(after, before, atol=1e-5, rtol=1e-4)
    assert vae.config.scaling_factor == 1.0 and vae.config.shift_factor == 0.0


def test_final_metrics_of_a_rerun_keep_the_logged_loss(tmp_path):
    """Rerunning a finished encoder pretrain trains no step: the card and history keep the last logged loss (it
    wrote NaN, and history.json was no longer strict JSON), and the final row is replaced, not repeated."""
    import json
    import time

    from imgalign.pretrain.encoder_common import final_metrics

    history = [{"step": 5, "train/loss": 1.2}, {"step": 10, "train/loss": 1.0, "acc": 0.5}]
    metrics, _ = final_metrics(lambda: {"acc": 0.5}, None, time.time() - 120, 10, history, tmp_path)
    assert metrics["train/loss"] == 1.0 and [h["step"] for h in history] == [5, 10]
    assert metrics["train/minutes"] == pytest.approx(2.0, abs=0.1)
    json.loads((tmp_path / "history.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    # a NaN logged loss is skipped for the last finite one
    history = [{"step": 5, "train/loss": 1.2}, {"step": 8, "train/loss": float("nan")}]
    metrics, _ = final_metrics(lambda: {}, None, time.time(), 10, history, tmp_path)
    assert metrics["train/loss"] == 1.2


def test_logit_normal_is_centred_on_the_logit_mean():
    t = t2i.logit_normal(20000, 1.0, 1.0, torch.Generator().manual_seed(0))
    # median of sigmoid(N(1, 1)) = sigmoid(1) = 0.731
    assert t.median().item() == pytest.approx(torch.sigmoid(torch.tensor(1.0)).item(), abs=0.02)


def test_training_batch_samples_each_latent_from_its_encoder_distribution_and_t_from_the_config(monkeypatch):
    n = 4
    lat_mean = torch.arange(n, dtype=torch.float32).view(n, 1, 1, 1).expand(n, 4, 8, 8).contiguous()
    lat_std = torch.full_like(lat_mean, 0.5)
    cfg = tiny_config(batch_size=64, cfg_dropout=0.0, logit_mean=0.3, logit_std=1.7)
    seen, real = [], t2i.logit_normal
    monkeypatch.setattr(t2i, "logit_normal", lambda k, m, s, g: seen.append((k, m, s)) or real(k, m, s, g))
    prompts = [f"prompt {i}" for i in range(n)]
    batch_prompts, xt, v, t = t2i.training_batch(
        lat_mean, lat_std, prompts, cfg, torch.Generator().manual_seed(0)
    )
    assert seen == [(64, 0.3, 1.7)]
    x0 = xt - t.view(-1, 1, 1, 1) * v  # x_t = (1-t) x0 + t eps, v = eps - x0
    mean = torch.tensor([float(p.split()[1]) for p in batch_prompts]).view(-1, 1, 1, 1)
    # x0 ~ N(lat_mean, lat_std^2): 64 x 256 draws of std 0.5 (standard error ~0.003)
    assert (x0 - mean).std().item() == pytest.approx(0.5, abs=0.02)
    assert (x0 - mean).mean().item() == pytest.approx(0.0, abs=0.02)


def _renders(n: int = 16) -> torch.Tensor:
    return t2i.render_dataset(n, 0, progress=False)[0]


def test_autoencoder_stage_resumes_after_kill_and_matches_uninterrupted(tmp_path, monkeypatch):
    """A kill during the autoencoder stage continues from its checkpoint (step, weights, optimizer, noise stream);
    the last step is checkpointed off the ckpt_every grid, at the autoencoder's own learning rate. Full-image crops
    (vae_crop=64, the largest validate allows) place the crop at the only offset there is."""
    images = _renders()
    cfg = tiny_config(vae_steps=3, vae_crop=64)
    for d in ("ref", "run"):
        (tmp_path / d).mkdir()
    torch.manual_seed(0)  # the initial weights, as pretrain seeds them
    ref = t2i.train_vae(cfg, tmp_path / "ref", images, False).state_dict()

    calls, real = {"n": 0}, t2i.recon_loss

    def dies_at_step_3(*a):
        calls["n"] += 1
        if calls["n"] == 5:  # two reconstruction losses a step (vae_mix): the first of step 3
            raise KeyboardInterrupt
        return real(*a)

    monkeypatch.setattr(t2i, "recon_loss", dies_at_step_3)
    torch.manual_seed(0)
    with pytest.raises(KeyboardInterrupt):
        t2i.train_vae(cfg, tmp_path / "run", images, False)
    assert t2i.load_state(tmp_path / "run" / "vae-ckpt.pt")["step"] == 2
    monkeypatch.setattr(t2i, "recon_loss", real)
    torch.manual_seed(0)
    run = t2i.train_vae(cfg, tmp_path / "run", images, False).state_dict()
    for k in ref:
        torch.testing.assert_close(run[k], ref[k], rtol=0, atol=0)
    st = t2i.load_state(tmp_path / "run" / "vae-ckpt.pt")
    assert st["step"] == 3
    assert st["opt"]["param_groups"][0]["lr"] == pytest.approx(t2i.lr_at(2, cfg.vae_lr, 100, 3))


def test_each_autoencoder_option_changes_training_on_its_own_and_mixing_blends_two_renders(
    tmp_path, monkeypatch
):
    images = _renders()
    targets, real = [], t2i.recon_loss
    monkeypatch.setattr(t2i, "recon_loss", lambda rec, x, w: targets.append(x) or real(rec, x, w))
    weights = {}
    for name, mix, noise in (("plain", 0.0, 0.0), ("mix", 1.0, 0.0), ("noise", 0.0, 0.5)):
        (tmp_path / name).mkdir()
        targets.clear()
        cfg = tiny_config(vae_steps=1, vae_mix=mix, vae_noise=noise)
        torch.manual_seed(0)  # the same initial weights
        weights[name] = t2i.train_vae(cfg, tmp_path / name, images, False).state_dict()
        if name == "mix":
            x, mixed = targets  # the reconstruction target, then the mixing target
            assert not torch.allclose(mixed, x)  # a x_i + (1 - a) x_perm(i): another render blended in
            assert mixed.min() >= x.min() - 1e-6 and mixed.max() <= x.max() + 1e-6
    for name in ("mix", "noise"):
        assert any(not torch.equal(weights[name][k], weights["plain"][k]) for k in weights["plain"]), name


def test_pretrain_trains_on_the_sampled_batch_with_the_scheduled_lr_and_checkpoints_the_last_step(
    tmp_path, monkeypatch
):
    from safetensors.torch import load_file

    seen: dict = {"batch": [], "loss": []}
    real_lat, real_batch, real_loss = t2i.encode_latents, t2i.training_batch, t2i.velocity_loss

    def latents(*a):
        seen["lat"] = real_lat(*a)
        return seen["lat"]

    def batch(*a):
        seen["batch"].append((a, real_batch(*a)))
        return seen["batch"][-1][1]

    def loss(transformer, xt, v, t, *rest):
        seen["loss"].append((xt, v, t))
        return real_loss(transformer, xt, v, t, *rest)

    monkeypatch.setattr(t2i, "encode_latents", latents)
    monkeypatch.setattr(t2i, "training_batch", batch)
    monkeypatch.setattr(t2i, "velocity_loss", loss)
    real_clip, clips = torch.nn.utils.clip_grad_norm_, []
    monkeypatch.setattr(
        torch.nn.utils,
        "clip_grad_norm_",
        lambda params, norm, *a, **k: clips.append(norm) or real_clip(params, norm),
    )
    cfg = tiny_config(steps=3, ckpt_every=2, ema=0.0, weight_decay=0.02)
    t2i.pretrain(cfg, tmp_path, progress=False)
    # every step of both stages (autoencoder, transformer) clips its gradient norm at 1
    assert clips == [1.0] * (cfg.vae_steps + cfg.steps)
    lat_mean, lat_std = seen["lat"]
    assert len(seen["batch"]) == len(seen["loss"]) == 3
    for (args, out), (xt, v, t) in zip(seen["batch"], seen["loss"]):
        assert args[0] is lat_mean and args[1] is lat_std  # latents sampled from (mean, std), not swapped
        assert xt is out[1] and v is out[2] and t is out[3]  # the loss sees the batch's own x_t, v and t
    st = t2i.load_state(tmp_path / t2i.WORK / "t2i-ckpt.pt")
    assert st["step"] == 3  # the last step is checkpointed off the ckpt_every grid
    (group,) = st["opt"]["param_groups"]
    assert group["lr"] == pytest.approx(t2i.lr_at(2, cfg.lr, cfg.warmup, cfg.steps))
    assert group["weight_decay"] == 0.02
    assert group["betas"] == (0.9, 0.99)
    # ema=0: the EMA follows every step, so the shipped weights are the last trained ones (up to the EMA's
    # rounding: s - (s - p))
    shipped = load_file(tmp_path / t2i.FOLDER / "transformer/diffusion_pytorch_model.safetensors")
    trained = st["models"][0]
    assert shipped.keys() <= trained.keys()
    for k in shipped:
        torch.testing.assert_close(shipped[k], trained[k], rtol=0, atol=1e-6)


def test_an_init_from_model_of_another_patch_or_shift_is_refused(tiny_pipeline_dir):
    with pytest.raises(ValueError, match="patch: model 2, config 4") as e:
        t2i.check_init_from(tiny_config(patch=4, shift=3.0, init_from=str(tiny_pipeline_dir)))
    assert "shift: model 1.0, config 3.0" in str(e.value)


def test_encode_latents_applies_the_autoencoder_scale_and_shift_to_mean_and_std():
    torch.manual_seed(0)
    vae = t2i.build_vae(tiny_config()).eval()
    images = _renders(2)
    with torch.no_grad():
        post = vae.encode(t2i.to_unit(images)).latent_dist
    vae.register_to_config(scaling_factor=2.0, shift_factor=0.5)
    mean, std = t2i.encode_latents(vae, images)
    torch.testing.assert_close(mean, (post.mean - 0.5) * 2.0)
    torch.testing.assert_close(std, post.std * 2.0)


def test_recon_loss_counts_a_pixel_off_the_background_in_one_channel_as_object():
    from imgalign.shapes import BACKGROUND

    bg = torch.tensor(BACKGROUND, dtype=torch.float32) / 127.5 - 1
    one_channel = bg + torch.tensor([0.05, 0.0, 0.0])  # off in red only: max |x - bg| 0.05, mean 0.017
    x = torch.stack([bg, one_channel], 1).view(1, 3, 1, 2)
    rec = x.clone()
    rec[..., 1] -= 0.5  # only the one-channel pixel is wrong: |e| + e^2 = 0.75 per channel
    assert t2i.recon_loss(rec, x, 5.0).item() == pytest.approx(0.75 * 5 / 6)  # weights 1 and 5


def test_decoder_noise_scale_is_the_channel_std_over_the_whole_batch():
    g = torch.Generator().manual_seed(0)
    quiet, loud = torch.randn(256, 1, 4, 4, generator=g) * 0.01, torch.randn(256, 1, 4, 4, generator=g)
    n = t2i.decoder_noise(torch.cat([quiet, loud]), 0.5, g)  # one channel, one batch std (~0.71) for both
    assert n[:256].std().item() == pytest.approx(n[256:].std().item(), rel=0.15)


def test_pretrain_logs_each_windows_mean_loss_and_a_quick_eval_leaves_training_unchanged(
    tmp_path, monkeypatch
):
    """Loss rows are the mean over their own LOSS_LOG_EVERY steps; quick evaluations (of the EMA weights) come every
    eval_every steps but not at the last one, and training goes on from the trained weights, not the EMA's. The
    run time adds the seconds of earlier invocations (timing.json)."""
    losses, evals, real_loss = [], [], t2i.velocity_loss

    def loss(*a):
        losses.append(real_loss(*a))
        return losses[-1]

    monkeypatch.setattr(t2i, "velocity_loss", loss)
    monkeypatch.setattr(t2i, "quick_eval", lambda pipe, metas, n, seed: evals.append(n) or (0.5, {"x": 0.25}))
    monkeypatch.setattr(t2i, "LOSS_LOG_EVERY", 2)
    runs = {}
    for every in (0, 2):
        out = tmp_path / str(every)
        (out / t2i.WORK).mkdir(parents=True)
        (out / t2i.WORK / "timing.json").write_text(json.dumps({"seconds": 1000.0}))
        losses.clear()
        metrics = t2i.pretrain(tiny_config(eval_every=every, eval_prompts=2), out, progress=False)
        assert metrics["train_seconds"] >= 1000.0
        runs[every] = t2i.load_state(out / t2i.WORK / "t2i-ckpt.pt")
    assert evals == [1]  # step 2 of 4 only
    vals = [x.item() for x in losses]
    log = json.loads(runs[2]["log"])
    assert [r["step"] for r in log] == [2, 2, 4] and log[1] == {"step": 2, "quick_eval": 0.5, "task/x": 0.25}
    assert log[0]["loss"] == pytest.approx((vals[0] + vals[1]) / 2) and log[2]["loss"] == pytest.approx(
        (vals[2] + vals[3]) / 2
    )
    for a, b in zip(runs[0]["models"][0].values(), runs[2]["models"][0].values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_the_card_gives_the_image_tokens_each_task_and_the_quick_evals(tmp_path):
    metrics = {"params": 10.0, "train_seconds": 60.0, "total_seconds": 120.0, "shapes_overall": 0.5}
    metrics["shapes/counting"] = 0.25
    t2i.write_card(
        tmp_path,
        tiny_config(patch=4, t5_tokens=2),
        metrics,
        [{"step": 2, "loss": 1.0}, {"step": 2, "quick_eval": 0.4}],
    )
    card = (tmp_path / "README.md").read_text()
    assert "patch 4 (16 image tokens)" in card
    assert "Sample with `max_sequence_length=2`" in card and "| overall |" not in card
    assert "| counting | 0.250 |" in card and "overall **0.500**" in card
    assert "- step 2: 0.400" in card
    # trained from scratch: the autoencoder stage is described, no init_from model
    assert "- autoencoder: 2 steps, batch 4, latent-mixing weight" in card and "continued from" not in card


def test_autoencoder_steps_crop_on_the_latent_grid_clip_to_1_and_ship_standardised_latents(
    tmp_path, monkeypatch
):
    images = _renders()
    targets, norms, real_loss, real_clip = [], [], t2i.recon_loss, torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(t2i, "recon_loss", lambda rec, x, w: targets.append(x) or real_loss(rec, x, w))

    def clip(params, max_norm, *a, **k):
        norms.append((max_norm, real_clip(params, max_norm, *a, **k).item()))
        return torch.tensor(norms[-1][1])

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip)
    for name in ("a", "plain", "mix"):
        (tmp_path / name).mkdir()
    torch.manual_seed(0)
    vae = t2i.train_vae(tiny_config(vae_steps=12, vae_mix=0.0, vae_noise=0.0), tmp_path / "a", images, False)
    assert [m for m, _ in norms] == [1.0] * 12
    # each target is a 32x32 crop of a render at offsets on the 4-pixel latent grid, anywhere in 0..32
    full, offsets = t2i.to_unit(images), set()
    for x in targets:
        (hit,) = [
            (oy, ox)
            for oy in range(33)
            for ox in range(33)
            if any(torch.equal(full[j, :, oy : oy + 32, ox : ox + 32], x[0]) for j in range(len(full)))
        ][:1]
        offsets |= set(hit)
    assert all(o % 4 == 0 for o in offsets) and max(offsets) > 8, offsets
    # the latent normalisation folded in after training: unit std and zero mean per channel on the renders
    with torch.no_grad():
        z = vae.encode(full).latent_dist.mean
    torch.testing.assert_close(z.std((0, 2, 3)), torch.ones(4), atol=1e-4, rtol=0)
    torch.testing.assert_close(z.mean((0, 2, 3)), torch.zeros(4), atol=1e-4, rtol=0)
    # with the mixing term zeroed, the first step's gradient is the reconstruction's (+ KL) alone, as with vae_mix=0
    calls = []

    def mix_zeroed(rec, x, w):
        calls.append(x)
        return real_loss(rec, x, w) * (0.0 if len(calls) % 2 == 0 else 1.0)

    monkeypatch.setattr(t2i, "recon_loss", mix_zeroed)
    norms.clear()
    for name, mix in (("plain", 0.0), ("mix", 1.0)):
        calls.clear()
        torch.manual_seed(0)
        t2i.train_vae(tiny_config(vae_steps=1, vae_mix=mix, vae_noise=0.0), tmp_path / name, images, False)
    assert norms[1][1] == pytest.approx(norms[0][1], rel=1e-5) and norms[0][1] > 0


def test_render_dataset_is_the_upright_renders_of_its_prompts_in_minus_one_to_one():
    import random

    from imgalign import shapes as W
    from imgalign.prompts.shapes import sample_training_specs

    images, prompts = t2i.render_dataset(3, 5, progress=False)
    specs, rng = sample_training_specs(3, 5), random.Random(6)
    for i, s in enumerate(specs):
        want = torch.from_numpy(np.array(W.render(s, rng)[0]))  # (H, W, 3) as rendered, not transposed
        assert torch.equal(images[i].permute(1, 2, 0), want) and prompts[i] == s.prompt()
    u8 = torch.tensor([0, 51, 255], dtype=torch.uint8)
    torch.testing.assert_close(t2i.to_unit(u8), torch.tensor([-1.0, -0.6, 1.0]))


def test_eval_subset_larger_than_the_eval_set_is_the_whole_set():
    assert len(t2i.eval_subset(1000)) == 360


def test_an_init_from_model_of_other_text_layers_autoencoder_or_context_length_is_refused(tiny_pipeline_dir):
    cfg = tiny_config(text_layers=3, vae_channels=[8, 8, 16], vae_groups=4, max_length=16)
    with pytest.raises(ValueError) as e:
        t2i.check_init_from(dataclasses.replace(cfg, init_from=str(tiny_pipeline_dir)))
    for want in ("text_layers: model 2, config 3", "vae_channels: model [8, 8, 8], config [8, 8, 16]",
                 "vae_groups: model 2, config 4", "max_length: model 12, config 16"):  # fmt: skip
        assert want in str(e.value)
    # the suggested fix pastes into a shell as one --set argument each (a "[8, 8, 8]" split into three)
    assert "--set vae_channels=[8,8,8] " in str(e.value)


def test_vae_channels_must_be_positive_not_only_multiples_of_the_groups():
    # 0 and -2 are multiples of 2: without the positivity check they reached the autoencoder's constructor
    for bad in ([0, 8, 8], [-2, 8, 8]):
        with pytest.raises(ValueError, match=r"must be positive multiples of vae_groups \(2\)"):
            tiny_config(vae_channels=bad).validate()


def test_eval_subset_is_every_stride_th_prompt_and_exactly_n_of_them():
    from imgalign.prompts.io import load_geneval_metadata
    from imgalign.prompts.shapes import EVAL_SET_PATH

    metas = load_geneval_metadata(EVAL_SET_PATH)
    assert len(metas) == 360
    # 360 // 12 = 30: prompts 0, 30, ..., 330; 360 // 7 = 51: 0, 51, ..., 306 (the 8th, 357, is cut)
    assert t2i.eval_subset(12) == metas[::30]
    assert t2i.eval_subset(7) == metas[0:307:51]


def test_encode_latents_covers_every_image_past_a_chunk_boundary():
    """Images are encoded 512 at a time; a count one past a chunk (and a single image) is encoded whole."""

    class Post:
        def __init__(self, x):
            self.mean = x[:, :1].clone()
            self.std = x[:, 1:2].abs() + 1

    class FakeVae:
        class config:
            scaling_factor, shift_factor = 1.0, 0.0

        def encode(self, x):
            return type("Out", (), {"latent_dist": Post(x)})()

    for n in (1, 513):
        images = torch.randint(0, 256, (n, 3, 2, 2), dtype=torch.uint8)
        mean, std = t2i.encode_latents(FakeVae(), images)
        assert mean.shape == (n, 1, 2, 2) and std.shape == (n, 1, 2, 2)
        torch.testing.assert_close(mean, t2i.to_unit(images)[:, :1])


def test_quick_eval_seeds_image_j_of_prompt_i_as_the_eval_suite_and_scores_each_prompts_task(monkeypatch):
    """The card's quick and final evaluations promise the numbers of `imgalign eval --suite shapes` at seed 0:
    image j of prompt i gets image_seed(seed, i, j), and each image counts for its own prompt's task."""
    import imgalign.eval.geneval as geneval
    import imgalign.eval.shapes_detector as sd
    import imgalign.sampling as sampling
    from imgalign.sampling import image_seed

    seen = {}

    def fake_generate(pipe, prompts, seeds, **kw):
        seen["prompts"], seen["seeds"] = prompts, seeds
        return [(p, s) for p, s in zip(prompts, seeds)]

    monkeypatch.setattr(sampling, "generate", fake_generate)
    monkeypatch.setattr(sd, "ShapesDetector", lambda: lambda img: None)
    # prompt "a" is always right, "b" right only for its image 1
    monkeypatch.setattr(
        geneval,
        "judge",
        lambda img, det, meta: type("J", (), {"correct": meta["prompt"] == "a" or img[1] % 2})(),
    )
    metas = [{"prompt": "a", "tag": "colors"}, {"prompt": "b", "tag": "counting"}]
    overall, tasks = t2i.quick_eval(None, metas, 2, seed=3)
    assert seen["prompts"] == ["a", "a", "b", "b"]
    assert seen["seeds"] == [
        image_seed(3, 0, 0),
        image_seed(3, 0, 1),
        image_seed(3, 1, 0),
        image_seed(3, 1, 1),
    ]
    b_right = sum(image_seed(3, 1, j) % 2 for j in range(2)) / 2
    assert tasks == {"colors": 1.0, "counting": b_right}
    assert overall == pytest.approx((1.0 + b_right) / 2)


def test_a_one_image_pretrain_adds_earlier_time_seeds_each_text_encoder_and_runs_the_final_eval(
    tmp_path, monkeypatch
):
    """n_images=1 is allowed and trains (every index drawn is that image). The work folder's timing.json holds the
    wall clock of earlier invocations of the run: it is added, not restarted from 0. Text encoder k starts from
    build_text_encoder(seed + k) (with lr 1e-30 the shipped weights are the initial ones). The final evaluation
    judges the shipped folder on the whole eval set with final_eval_images per prompt."""
    import time

    from safetensors.torch import load_file

    from imgalign.prompts.io import load_geneval_metadata
    from imgalign.prompts.shapes import EVAL_SET_PATH

    calls = []

    def fake_quick_eval(pipe, metas, n, seed):
        calls.append((pipe, metas, n, seed))
        time.sleep(0.2)  # the final evaluation's time counts in total_seconds only
        return 0.25, {"colors": 0.5, "counting": 0.0}

    monkeypatch.setattr(t2i, "quick_eval", fake_quick_eval)
    (tmp_path / t2i.WORK).mkdir()
    (tmp_path / t2i.WORK / "timing.json").write_text(json.dumps({"seconds": 3600.0}))
    cfg = tiny_config(n_images=1, steps=1, vae_steps=1, final_eval_images=2, lr=1e-30, seed=3)
    metrics = t2i.pretrain(cfg, tmp_path, progress=False)
    assert 3600 < metrics["train_seconds"] < 3600 + 900
    assert metrics["total_seconds"] >= metrics["train_seconds"] + 0.2
    saved = json.loads((tmp_path / t2i.WORK / "timing.json").read_text())["seconds"]
    assert saved == pytest.approx(metrics["total_seconds"])
    folder = tmp_path / t2i.FOLDER
    tok = save_tokenizer(tmp_path / "tok", cfg.max_length)
    for k, name in ((1, "text_encoder"), (2, "text_encoder_2")):
        shipped = load_file(folder / name / "model.safetensors")
        built = t2i.build_text_encoder(cfg, tok, cfg.seed + k).state_dict()
        for key, w in shipped.items():
            torch.testing.assert_close(w, built[key], msg=f"{name} {key}")
    ((pipe, metas, n, seed),) = calls
    assert metas == load_geneval_metadata(EVAL_SET_PATH) and (n, seed) == (2, 0)
    assert pipe.transformer.config.num_layers == cfg.layers
    assert metrics["shapes_overall"] == 0.25 and metrics["shapes/colors"] == 0.5
    card = (folder / "README.md").read_text()
    assert "overall **0.250**" in card and "| colors | 0.500 |" in card and "| overall |" not in card


def test_each_text_encoder_is_built_from_its_own_seed(tmp_path):
    cfg = tiny_config()
    tok = save_tokenizer(tmp_path / "tok", cfg.max_length)
    a, b, c = (t2i.build_text_encoder(cfg, tok, s).state_dict() for s in (1, 1, 2))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_settings_that_take_no_negative_or_infinite_value_are_refused():
    """vae_crop=0 passed and the autoencoder stage failed on its empty crops after rendering the training images;
    final_eval_images=-1 passed and the card reported a shapes overall of 0.000 from no image; an infinite shift
    or logit_std and a fourth autoencoder block passed too (mutation round 9)."""
    for bad, msg in (
        ({"vae_crop": 0}, r"^vae_crop must be at least 1 \(got 0\)"),
        ({"final_eval_images": -1}, r"^final_eval_images must be at least 0 \(got -1\)"),
        ({"eval_every": -2}, r"^eval_every must be at least 0"),
        ({"warmup": -1}, r"^warmup must be at least 0"),
        ({"shift": math.inf}, r"^shift must be > 0 and finite \(got inf\)"),
        ({"logit_std": math.inf}, r"^logit_std must be > 0 and finite \(got inf\)"),
        ({"vae_channels": [8, 8, 8, 8]}, r"^vae_channels needs 3 entries"),
    ):
        with pytest.raises(ValueError, match=msg):
            tiny_config(**bad).validate()
    tiny_config(final_eval_images=0, eval_every=0, warmup=0, vae_crop=4).validate()  # 0 turns them off
    tiny_config(patch=8, t5_tokens=0).validate()  # the largest patch (4 image tokens) and no 'T5' token


def test_loss_weights_and_weight_decay_that_are_negative_or_infinite_are_refused():
    """vae_fg_weight, vae_kl and weight_decay were unchecked: a negative one trained away from its target (AdamW
    refused a negative decay only after the renders), an infinite one to NaN. The CLIP's and VLM's decay too."""
    for bad, msg in (
        ({"vae_fg_weight": 0.0}, r"^vae_fg_weight must be > 0 and finite \(got 0.0\); set it with --set"),
        ({"vae_fg_weight": math.inf}, r"^vae_fg_weight must be > 0 and finite"),
        ({"vae_kl": -1e-6}, r"^vae_kl must be >= 0 and finite"),
        ({"vae_mix": math.inf}, r"^vae_mix must be >= 0 and finite"),
        ({"weight_decay": -0.01}, r"^weight_decay must be >= 0 and finite"),
        ({"weight_decay": math.nan}, r"^weight_decay must be >= 0 and finite"),
        ({"logit_mean": math.inf}, r"^logit_mean must be finite"),
    ):
        with pytest.raises(ValueError, match=msg):
            tiny_config(**bad).validate()
    tiny_config(vae_kl=0.0, vae_mix=0.0, vae_noise=0.0, weight_decay=0.0, vae_fg_weight=1.0).validate()
    from imgalign.pretrain import clip, vlm

    for mod in (clip, vlm):
        mod.Config(weight_decay=0.0).validate()
        with pytest.raises(ValueError, match=r"^weight_decay must be >= 0 and finite \(got -1.0\)"):
            mod.Config(weight_decay=-1.0).validate()


def test_an_init_from_folder_with_a_damaged_model_index_is_named(tmp_path):
    """json.JSONDecodeError cannot be rebuilt from one message: the check raised a TypeError about its
    constructor instead of naming the folder and the file."""
    (tmp_path / "model_index.json").write_text("{not json")
    # the folder check names it (stop 51): an incomplete model, as a folder missing a part is
    with pytest.raises(
        FileNotFoundError, match=r"init_from='.*': .*model_index.json is damaged: not valid JSON \(Expecting"
    ):
        t2i.check_init_from(tiny_config(init_from=str(tmp_path)))


def test_an_init_from_folder_with_a_damaged_component_config_names_the_file(tmp_path):
    """A cut transformer/config.json said only "Expecting value: line 1 column 1 (char 0)"."""
    import shutil

    from imgalign.hub import embedded_path

    folder = tmp_path / "m"
    shutil.copytree(embedded_path("shapes"), folder)
    (folder / "transformer" / "config.json").write_text("")
    with pytest.raises(
        ValueError, match=r"transformer/config.json is damaged: not valid JSON \(Expecting value"
    ):
        t2i.check_init_from(tiny_config(init_from=str(folder)))

"""Behaviour of the shapes text-to-image pretraining (:mod:`imgalign.pretrain.t2i`) that no test pinned (mutation
round 17): the patch sizes validate allows, the autoencoder's GroupNorm groups, its KL term, latent mixing, decoder
noise and latent statistics, the work folder's JSON files, the loss rows kept over a resume and the card."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from test_t2i import TINY_T2I

from imgalign.pretrain import t2i


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def tiny(**kw: object) -> t2i.Config:
    return t2i.Config(**{**TINY_T2I, **kw})


@pytest.fixture(scope="module")
def renders() -> torch.Tensor:
    return t2i.render_dataset(16, 0, False)[0]


def test_only_patches_of_1_2_4_and_8_are_allowed() -> None:
    """A patch of 16 would leave one image token of the 16x16 latents; 3 does not divide them."""
    for bad in (3, 16):
        with pytest.raises(ValueError, match=r"^patch must be 1, 2, 4 or 8"):
            tiny(patch=bad).validate()
    for ok in (1, 2, 4, 8):
        tiny(patch=ok).validate()


def test_the_autoencoder_is_built_with_the_configs_groupnorm_groups() -> None:
    """vae_groups reaches every GroupNorm of the autoencoder (the default's 2 hid a constant)."""
    vae = t2i.build_vae(tiny(vae_groups=4))
    assert vae.config.norm_num_groups == 4
    assert {m.num_groups for m in vae.modules() if isinstance(m, torch.nn.GroupNorm)} == {4}


def _decode_spy(monkeypatch: pytest.MonkeyPatch, seen: dict) -> None:
    """Record every latent the autoencoder of train_vae decodes, in seen["z"]."""
    real_build = t2i.build_vae

    def build(cfg: t2i.Config):
        vae = real_build(cfg)
        decode = vae.decode
        vae.decode = lambda z: (seen.setdefault("z", []).append(z.detach().clone()), decode(z))[1]
        return vae

    monkeypatch.setattr(t2i, "build_vae", build)


def test_latent_mixing_decodes_a_blend_of_each_latent_with_another_of_the_batch(
    tmp_path: Path, renders: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mixing term decodes a z_i + (1 - a) z_perm(i), the latents of two renders, with the a and the
    permutation its image target uses (a blend of a latent with itself is no mix)."""
    seen: dict = {}
    _decode_spy(monkeypatch, seen)
    real_perm, real_rand = torch.randperm, torch.rand
    monkeypatch.setattr(torch, "randperm", lambda *a, **k: seen.setdefault("perm", real_perm(*a, **k)))
    monkeypatch.setattr(torch, "rand", lambda *a, **k: seen.setdefault("a", real_rand(*a, **k)))
    torch.manual_seed(0)
    t2i.train_vae(tiny(vae_steps=1, vae_mix=1.0, vae_noise=0.0), tmp_path, renders, False)
    z, mixed = seen["z"][:2]  # the step's reconstruction, then its mix (the statistics' decodes come after)
    perm, a = seen["perm"], seen["a"]
    assert not torch.equal(perm, torch.arange(len(perm)))
    torch.testing.assert_close(mixed, a * z + (1 - a) * z[perm])
    assert not torch.allclose(mixed, z)


def test_decoder_noise_is_scaled_by_the_detached_posterior_means(
    tmp_path: Path, renders: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decoder noise's scale (the batch's channel std of the posterior means) is a constant to the gradient:
    the encoder is not trained through the size of the noise it gets."""
    grads, real = [], t2i.decoder_noise
    monkeypatch.setattr(
        t2i, "decoder_noise", lambda mean, rel, g: grads.append(mean.requires_grad) or real(mean, rel, g)
    )
    torch.manual_seed(0)
    t2i.train_vae(tiny(vae_steps=1, vae_mix=0.0, vae_noise=0.5), tmp_path, renders, False)
    assert grads == [False]


def _kl(vae, x: torch.Tensor) -> float:
    with torch.no_grad():
        return vae.encode(x).latent_dist.kl().mean().item()


def test_the_autoencoder_step_lowers_its_kl_term(
    tmp_path: Path, renders: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the reconstruction loss zeroed, a step on the KL term alone lowers the KL of the batch it trained on
    (its sign adds it to the loss: subtracted, it was maximised). One render four times, cropped whole: every batch
    is those four images."""
    images = renders[:1].repeat(4, 1, 1, 1)
    monkeypatch.setattr(t2i, "recon_loss", lambda rec, x, w: 0 * rec.sum())
    cfg = tiny(vae_steps=1, vae_batch=4, vae_crop=64, vae_mix=0.0, vae_noise=0.0, vae_kl=1.0, vae_lr=0.1)
    x = t2i.to_unit(images)
    torch.manual_seed(0)
    before = _kl(t2i.build_vae(cfg), x)
    torch.manual_seed(0)
    t2i.train_vae(cfg, tmp_path, images, False)
    trained = t2i.build_vae(cfg)
    trained.load_state_dict(
        t2i.load_state(tmp_path / "vae-ckpt.pt")["model"]
    )  # before the latent normalisation
    assert _kl(trained, x) < before


def test_the_latent_statistics_cover_the_images_past_the_first_256(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-channel mean and std folded into the autoencoder are those of the latents of up to 4096 images, 256
    at a time, not of the first chunk alone. (16x16 images, cropped whole, keep the test fast: the autoencoder is
    convolutional.)"""
    g = torch.Generator().manual_seed(0)
    images = torch.cat(
        [
            torch.randint(0, 64, (256, 3, 16, 16), generator=g),
            torch.randint(192, 256, (64, 3, 16, 16), generator=g),
        ]
    ).to(torch.uint8)
    folded, real = [], t2i.fold_latent_normalisation
    monkeypatch.setattr(
        t2i, "fold_latent_normalisation", lambda vae, mu, s: folded.append((mu, s)) or real(vae, mu, s)
    )
    cfg = tiny(vae_steps=1, vae_crop=64)
    torch.manual_seed(0)
    t2i.train_vae(cfg, tmp_path, images, False)
    vae = t2i.build_vae(cfg).eval()
    vae.load_state_dict(t2i.load_state(tmp_path / "vae-ckpt.pt")["model"])
    with torch.no_grad():
        z = torch.cat(
            [vae.encode(t2i.to_unit(images[i : i + 64])).latent_dist.mean for i in range(0, 320, 64)]
        )
    ((mu, sigma),) = folded
    torch.testing.assert_close(mu, z.mean((0, 2, 3)), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(sigma, z.std((0, 2, 3)), atol=1e-4, rtol=1e-4)


def test_a_stale_autoencoder_tmp_folder_is_not_shipped_in_the_autoencoder(
    tmp_path: Path, renders: torch.Tensor
) -> None:
    """A work/vae.tmp left by a save that was cut short is removed before the autoencoder is written into it: its
    files do not end up in work/vae."""
    (tmp_path / "vae.tmp").mkdir()
    (tmp_path / "vae.tmp" / "stale.safetensors").write_bytes(b"cut short")
    torch.manual_seed(0)
    t2i.train_vae(tiny(vae_steps=1), tmp_path, renders, False)
    assert sorted(p.name for p in (tmp_path / "vae").iterdir()) == [
        "config.json",
        "diffusion_pytorch_model.safetensors",
    ]


def test_a_work_json_file_that_is_no_text_or_no_object_is_named_as_damaged(tmp_path: Path) -> None:
    """t2i-work/config.json or timing.json holding bytes that are no UTF-8 text, or a JSON list, is named with the
    fix (it was a UnicodeDecodeError, or an AttributeError of the list)."""
    path = tmp_path / "config.json"
    path.write_bytes(b"\xff\xfe{")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))} is damaged \(not valid JSON: .*\); FIX$"):
        t2i.read_work_json(path, "FIX")
    for text, kind in (("[1, 2]", "list"), ("null", "NoneType"), ("3", "int")):
        path.write_text(text)
        with pytest.raises(ValueError, match=rf"is damaged \(a JSON {kind}, not an object\); FIX$"):
            t2i.read_work_json(path, "FIX")
    path.write_text('{"steps": 3}')
    assert t2i.read_work_json(path, "FIX") == {"steps": 3}


def test_a_resume_keeps_the_loss_rows_logged_before_the_kill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The training log travels in the checkpoint: rows logged before a kill are still in it (and the card's data)
    after the resume."""
    monkeypatch.setattr(t2i, "LOSS_LOG_EVERY", 1)
    calls, real = {"n": 0}, t2i.flow_matching_pair

    def dies_at_step_3(*a: torch.Tensor):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # after the step-2 checkpoint
        return real(*a)

    monkeypatch.setattr(t2i, "flow_matching_pair", dies_at_step_3)
    cfg = tiny(steps=3, ckpt_every=2, vae_steps=1)
    with pytest.raises(KeyboardInterrupt):
        t2i.pretrain(cfg, tmp_path, progress=False)
    before = json.loads(t2i.load_state(tmp_path / t2i.WORK / "t2i-ckpt.pt")["log"])
    assert [r["step"] for r in before] == [1, 2]
    monkeypatch.setattr(t2i, "flow_matching_pair", real)
    t2i.pretrain(cfg, tmp_path, progress=False)
    log = json.loads(t2i.load_state(tmp_path / t2i.WORK / "t2i-ckpt.pt")["log"])
    assert [r["step"] for r in log] == [1, 2, 3] and log[:2] == before


def test_the_card_gives_the_quick_evaluations_prompt_count(tmp_path: Path) -> None:
    metrics = {"params": 10.0, "train_seconds": 60.0, "total_seconds": 60.0}
    t2i.write_card(tmp_path, tiny(eval_prompts=5), metrics, [{"step": 2, "quick_eval": 0.4}])
    card = (tmp_path / "README.md").read_text()
    assert "Quick evaluations during training (5 prompts, 1 image each, EMA weights):" in card
    assert "Shapes suite" not in card  # no final evaluation in the metrics


def test_an_init_from_folder_that_does_not_exist_is_named_so_not_as_a_lora_checkpoint(tmp_path: Path) -> None:
    """Only a folder holding LoRA weights and no model_index.json is named a LoRA checkpoint; a missing folder or
    one without model_index.json gets the folder check's own message."""
    from imgalign.pipelines import IncompleteModelError

    with pytest.raises(IncompleteModelError, match=r"^init_from='.*nowhere': model folder .* does not exist"):
        t2i.check_init_from(tiny(init_from=str(tmp_path / "nowhere")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(IncompleteModelError, match=r"model_index.json is missing") as e:
        t2i.check_init_from(tiny(init_from=str(tmp_path / "empty")))
    assert "LoRA" not in str(e.value)

"""Discriminator and artifact rewards: heads, losses, online updates, state, the fit commands, the shipped model."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from imgalign.cli import main
from imgalign.rewards.artifact import ARTIFACT_KINDS, add_artifact, artifact_dataset
from imgalign.rewards.base import build_reward, to_pil
from imgalign.rewards.discriminator import clipped_linear
from imgalign.rewards.features import build_features, image_stats
from imgalign.rewards.fid import shapes_reference_images
from imgalign.rewards.heads import FeatureHead, fit_head, head_loss, load_head, save_head

torch.set_num_threads(1)


def degrade(x: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """Stand-in for base-model samples: blurred, noisy, colour-shifted renders."""
    g = torch.Generator().manual_seed(seed)
    blurred = F.avg_pool2d(F.pad(x, (1, 1, 1, 1), mode="replicate"), 3, 1)
    jitter = 1 + 0.15 * torch.randn(x.shape[0], 3, 1, 1, generator=g)
    return (blurred * jitter + 0.05 * torch.randn(x.shape, generator=g)).clamp(0, 1)


def write_folder(folder: Path, images: torch.Tensor) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, im in enumerate(to_pil(images)):
        im.save(folder / f"{i:04d}.png")
    return folder


def test_losses_hand_computed() -> None:
    lp, ln = torch.tensor([0.0, 2.0]), torch.tensor([0.0])
    assert head_loss(lp, ln, "bce").item() == pytest.approx((0.693147 + 0.126928) / 2 + 0.693147, rel=1e-5)
    assert head_loss(lp, ln, "hinge").item() == pytest.approx(0.5 + 1.0)
    # hinge on negatives is relu(1 + l): l = 0.5 costs 1.5, l = -2 (confidently fake) costs 0
    assert head_loss(lp, torch.tensor([0.5, -2.0]), "hinge").item() == pytest.approx(0.5 + (1.5 + 0.0) / 2)
    assert torch.equal(clipped_linear(torch.tensor([-3.0, 0.5, 2.0]), 1.0), torch.tensor([-1.0, 0.5, 1.0]))
    with pytest.raises(ValueError, match="valid: bce, hinge"):
        head_loss(lp, ln, "mse")


def test_head_normalises_inside_and_roundtrips(tmp_path: Path) -> None:
    feats = torch.randn(50, 4) * torch.tensor([1.0, 10.0, 0.1, 3.0]) + 5
    head = FeatureHead(4, hidden=0)
    head.set_normalisation(feats)
    w, b = head.net[0].weight, head.net[0].bias
    expected = ((feats - feats.mean(0)) / feats.std(0)) @ w.T + b
    assert torch.allclose(head(feats), expected.squeeze(-1), atol=1e-5)
    save_head(tmp_path / "h.safetensors", head, "stats", "artifact", {"note": 1})
    h2, meta = load_head(tmp_path / "h.safetensors", task="artifact")
    assert meta["features"] == "stats" and meta["extra"] == {"note": 1}
    assert torch.allclose(h2(feats), head(feats))
    with pytest.raises(ValueError, match="not of the 'discriminator' reward"):
        load_head(tmp_path / "h.safetensors", task="discriminator")


def test_accuracy_hand_computed() -> None:
    """accuracy = (positives with logit > 0 + negatives with logit <= 0) / all examples, on an identity head."""
    from imgalign.rewards.heads import accuracy

    head = FeatureHead(1)
    with torch.no_grad():
        head.net[0].weight.fill_(1.0)
        head.net[0].bias.zero_()
    pos, neg = torch.tensor([[1.0], [-1.0], [2.0]]), torch.tensor([[-1.0], [0.0]])
    assert accuracy(head, pos, neg) == pytest.approx(4 / 5)  # a logit of 0 counts as negative


def test_fit_head_separates_shifted_gaussians() -> None:
    g = torch.Generator().manual_seed(0)
    pos, neg = torch.randn(200, 8, generator=g) + 1.5, torch.randn(200, 8, generator=g)
    res = fit_head(pos, neg, hidden=16, epochs=200)
    assert res.metrics["val_acc"] > 0.9


def test_fit_head_reports_held_out_accuracy_and_normalises_on_both_classes() -> None:
    """Noise labels in 32 dims: the head memorises its 28 training rows (train_acc 1) but not the 7 held out; the
    counts are of all examples; the standardisation is fitted on both classes' training rows; weight decay
    shrinks the weights."""
    g = torch.Generator().manual_seed(1)
    pos, neg = torch.randn(20, 32, generator=g), torch.randn(15, 32, generator=g)
    res = fit_head(pos, neg, epochs=300, lr=0.1, weight_decay=0.0, val_frac=0.2)
    assert res.metrics["n_pos"] == 20 and res.metrics["n_neg"] == 15
    assert res.metrics["train_acc"] == 1.0 and res.metrics["val_acc"] < 0.9
    # AdamW's decoupled weight decay reaches the optimizer: lr·wd = 0.1 shrinks the weights each step
    decayed = fit_head(pos, neg, epochs=300, lr=0.1, weight_decay=1.0, val_frac=0.2)
    assert decayed.head.net[0].weight.norm() < 0.5 * res.head.net[0].weight.norm()
    full = fit_head(pos, neg, epochs=1, val_frac=0.0)
    assert "val_acc" not in full.metrics
    torch.testing.assert_close(full.head.mean, torch.cat([pos, neg]).mean(0))
    torch.testing.assert_close(full.head.std, torch.cat([pos, neg]).std(0))
    # seeded: the same head whatever torch's global RNG holds
    heads = []
    for s in (5, 6):
        torch.manual_seed(s)
        heads.append(fit_head(pos, neg, hidden=4, epochs=2).head.state_dict())
    assert all(torch.equal(heads[0][k], heads[1][k]) for k in heads[0])


def test_online_discriminator_learns_and_restores_state() -> None:
    r = build_reward("discriminator:features=stats,ref_size=64,hidden=16,lr=0.01,steps=5")
    fake = degrade(shapes_reference_images(32, seed=3))
    real = shapes_reference_images(16, seed=4)
    for _ in range(10):
        metrics = r.update(fake)
    assert metrics["disc/acc"] > 0.8
    out = r(torch.cat([real, fake[:16]]), [""] * 32)
    assert out.scores[:16].mean() > out.scores[16:].mean()
    state = r.state_dict()
    r.update(fake)
    r2 = build_reward("discriminator:features=stats,ref_size=64,hidden=16,lr=0.01,steps=5")
    r2.load_state_dict(state)
    r.load_state_dict(state)
    assert torch.allclose(r2(real, [""] * 16).scores, r(real, [""] * 16).scores)
    # a fresh head is the same in every run, whatever torch's global RNG holds (a resumed run is exact)
    torch.manual_seed(123)
    a = build_reward("discriminator:features=stats,ref_size=64,hidden=16")
    b = build_reward("discriminator:features=stats,ref_size=64,hidden=16")
    assert all(torch.equal(x, y) for x, y in zip(a.head.state_dict().values(), b.head.state_dict().values()))
    clipped = build_reward("discriminator:features=stats,ref_size=64,hidden=16,reward=clipped,clip=0.5")
    clipped.load_state_dict(state)
    assert clipped(fake, [""] * 32).scores.abs().max() <= 0.5


def test_fit_discriminator_command(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    real = write_folder(tmp_path / "real", shapes_reference_images(60, seed=1))
    fake = write_folder(tmp_path / "fake", degrade(shapes_reference_images(60, seed=2)))
    out = tmp_path / "disc.safetensors"
    for flag, value in (("--hidden", "-3"), ("--epochs", "0"), ("--lr", "0")):
        argv = ["rewards", "fit-discriminator", "--real", str(real), "--fake", str(fake), "--out", str(out)]
        assert main([*argv, flag, value]) == 2
        assert f"{flag} must be" in capsys.readouterr().err and not out.exists()
    rc = main(
        [
            "rewards",
            "fit-discriminator",
            "--real",
            str(real),
            "--fake",
            str(fake),
            "--features",
            "stats",
            "--out",
            str(out),
            "--hidden",
            "32",
            "--epochs",
            "200",
        ]
    )
    assert rc == 0 and out.is_file()
    assert '"val_acc"' in capsys.readouterr().out
    r = build_reward(f"discriminator:head={out}")
    assert not r.online and r.ready()  # a fitted head scores from the start
    with pytest.raises(ValueError, match="was fitted on features 'stats', not 'shapes-clip'"):
        build_reward(f"discriminator:head={out},features=shapes-clip")
    with pytest.raises(ValueError, match="patch_weight needs patch tokens"):
        build_reward(f"discriminator:head={out},patch_weight=0.3")
    held_real, held_fake = (
        shapes_reference_images(20, seed=7),
        degrade(shapes_reference_images(20, seed=8), 1),
    )
    s = r(torch.cat([held_real, held_fake]), [""] * 40).scores
    assert ((s[:20] > 0).float().mean() + (s[20:] <= 0).float().mean()) / 2 >= 0.8
    with pytest.raises(RuntimeError, match="online"):
        r.update(held_fake)
    # a fitted head is frozen: a trainer must not update it (it crashed at step 1's end)
    assert not r.stateful
    assert build_reward("discriminator:features=stats").stateful  # the online one is updated and checkpointed
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(out.read_bytes()[:300])
    with pytest.raises(ValueError, match=f"{cut} is not an imgalign feature head"):
        build_reward(f"discriminator:head={cut}")
    with pytest.raises(IsADirectoryError, match="is a folder"):
        from imgalign.rewards.heads import load_head, save_head

        save_head(tmp_path, load_head(out)[0], "stats", "discriminator", {})
    assert not list(tmp_path.parent.glob(f".{tmp_path.name}.tmp"))


def test_fit_commands_refuse_an_out_they_cannot_write_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fit-discriminator, fit-artifact and build-shapes-artifact check --out (a path through a file, a folder that
    takes no new file) before reading an image or fitting (safetensors' own I/O error came after the fit)."""
    a = write_folder(tmp_path / "a", shapes_reference_images(4, seed=1))
    b = write_folder(tmp_path / "b", shapes_reference_images(4, seed=2))
    note = tmp_path / "note.txt"
    note.write_text("a file")

    def no_work(*args, **kwargs):
        raise AssertionError("work began before --out was checked")

    for target in ("fit_discriminator", "fit_artifact", "build_shapes_artifact"):
        monkeypatch.setattr(
            f"imgalign.rewards.{'discriminator' if 'disc' in target else 'artifact'}.{target}", no_work
        )
    monkeypatch.setattr("imgalign.rewards.io.load_image_folder", no_work)
    monkeypatch.setattr("imgalign.rewards.io.encode_image_folder", no_work)
    for out, message in (
        (note / "h.safetensors", f"'{note}' is a file, not a folder"),
        (Path("/proc/h"), "cannot write in '/proc'"),
    ):
        for argv in (
            ["fit-discriminator", "--real", str(a), "--fake", str(b)],
            ["fit-artifact", "--clean", str(a), "--artifact", str(b)],
            ["build-shapes-artifact"],
        ):
            assert main(["rewards", *argv, "--out", str(out)]) == 2
            assert message in capsys.readouterr().err, argv


def test_build_shapes_artifact_without_out_rebuilds_the_embedded_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without --out it writes the folder the artifact reward loads by default (the hub's shapes-artifact)."""
    from imgalign.hub import embedded_path

    seen = []
    monkeypatch.setattr(
        "imgalign.rewards.artifact.build_shapes_artifact", lambda out, **kwargs: seen.append(Path(out)) or {}
    )
    assert main(["rewards", "build-shapes-artifact"]) == 0
    assert seen == [embedded_path("shapes-artifact")]


@pytest.mark.parametrize("kind", ARTIFACT_KINDS)
def test_each_artifact_kind_changes_the_image(kind: str) -> None:
    x = shapes_reference_images(2, seed=0)[1]
    y = add_artifact(x, kind, random.Random(0))
    assert y.shape == x.shape and y.min() >= 0 and y.max() <= 1
    assert (y - x).abs().mean() > 1e-3
    assert torch.equal(y, add_artifact(x, kind, random.Random(0)))  # seeded


@pytest.mark.parametrize("kind", ["noise", "smear"])
def test_a_regional_artifact_leaves_the_rest_of_the_image_alone(kind: str) -> None:
    """noise and smear act inside soft elliptical regions: pixels far from them keep their exact values."""
    x = shapes_reference_images(2, seed=0)[1]
    same = (add_artifact(x, kind, random.Random(0)) == x).all(0).float().mean()
    assert 0.05 < same < 0.95


def test_the_artifact_reward_refuses_a_head_of_another_task(tmp_path: Path) -> None:
    """A folder holding a discriminator head is not an artifact model: refused by name, not scored."""
    save_head(tmp_path / "head.safetensors", FeatureHead(4, hidden=0), "stats", "discriminator", {})
    with pytest.raises(
        ValueError,
        match="is a head of the 'discriminator' reward, not of the 'artifact' reward; give one made with "
        "`imgalign rewards fit-artifact`",
    ):
        build_reward(f"artifact:model={tmp_path}")


def test_an_unknown_artifact_kind_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown artifact kind 'blur'; valid: noise, smear"):
        add_artifact(torch.zeros(3, 8, 8), "blur", random.Random(0))


def test_artifact_images_are_made_from_other_renders_than_the_clean_ones() -> None:
    """artifact_dataset's artifact images come from renders of seed + 1 (a classifier fitted on pairs of one render
    could separate them by the difference alone), kinds cycling in order."""
    clean, art, names = artifact_dataset(9, seed=3)
    other, rng = shapes_reference_images(9, seed=4), random.Random(3)
    assert names == [ARTIFACT_KINDS[i % len(ARTIFACT_KINDS)] for i in range(9)]
    assert torch.equal(clean, shapes_reference_images(9, seed=3)) and not torch.equal(clean, other)
    assert all(torch.equal(art[i], add_artifact(other[i], names[i], rng)) for i in range(9))


def test_shipped_shapes_artifact_model_accuracy() -> None:
    """Acceptance: the shipped model on fresh renders (seeds unseen in training) is >= 0.9 accurate."""
    r = build_reward("artifact")
    clean, art, _ = artifact_dataset(70, seed=777)
    s = r(torch.cat([clean, art]), [""] * 140).scores
    assert (s <= 0).all()  # log-probabilities
    acc = (
        (s[:70] > torch.log(torch.tensor(0.5))).float().mean()
        + (s[70:] <= torch.log(torch.tensor(0.5))).float().mean()
    ) / 2
    assert acc >= 0.9


def test_fit_artifact_command(tmp_path: Path) -> None:
    clean, art, _ = artifact_dataset(40, seed=5)
    c, a = write_folder(tmp_path / "clean", clean), write_folder(tmp_path / "art", art)
    out = tmp_path / "art.safetensors"
    assert main(["rewards", "fit-artifact", "--clean", str(c), "--artifact", str(a), "--out", str(out)]) == 0
    r = build_reward(f"artifact:model={out}")
    out_ = r(torch.cat([clean[:10], art[:10]]), [""] * 20)
    s = out_.scores
    assert s[:10].mean() > s[10:].mean()
    assert [d["p_clean"] for d in out_.details] == pytest.approx(s.exp().tolist())  # p = exp(log p)
    assert (
        main(
            [
                "rewards",
                "fit-artifact",
                "--clean",
                str(tmp_path / "nope"),
                "--artifact",
                str(a),
                "--out",
                str(out),
            ]
        )
        == 2
    )


def test_fit_artifact_on_folders_reads_a_batch_at_a_time_and_fits_the_head_fit_artifact_fits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fit-artifact read both folders' pixels at once (10,000 images of 512x512 are 31 GB as float32); it now
    encodes them a batch at a time, with the artifact images resized to the clean images' size, and fits the head
    fit_artifact fits on the folders loaded whole."""
    from safetensors.torch import load_file

    from imgalign.rewards import io
    from imgalign.rewards.artifact import fit_artifact

    clean, art, _ = artifact_dataset(6, seed=5)
    c = write_folder(tmp_path / "clean", clean)
    a = write_folder(tmp_path / "art", F.interpolate(art, size=(80, 72), mode="bilinear"))
    kw = {"hidden": 0, "epochs": 20, "val_frac": 0.0}
    fit_artifact(
        io.load_image_folder(c),
        io.load_image_folder(a, size=64),
        "stats",
        tmp_path / "whole.safetensors",
        **kw,
    )
    batches: list[tuple[int, ...]] = []
    encode = io.encode_image_folder

    def small_batches(path, enc, size=None, batch_size=64):
        return encode(path, lambda x: batches.append(tuple(x.shape)) or enc(x), size, batch_size=4)

    monkeypatch.setattr(io, "encode_image_folder", small_batches)
    monkeypatch.setattr(
        io, "load_image_folder", lambda *args, **kwargs: pytest.fail("a whole folder was loaded")
    )
    out = str(tmp_path / "batched.safetensors")
    argv = ["--clean", str(c), "--artifact", str(a), "--features", "stats", "--out", out]
    assert main(["rewards", "fit-artifact", *argv, "--hidden", "0", "--epochs", "20", "--val-frac", "0"]) == 0
    assert batches == [(4, 3, 64, 64), (2, 3, 64, 64)] * 2  # the artifact images at the clean size
    with pytest.raises(TypeError, match="both as image batches or both as folders"):
        fit_artifact(c, clean, "stats", tmp_path / "x.safetensors")
    whole, batched = load_file(tmp_path / "whole.safetensors"), load_file(tmp_path / "batched.safetensors")
    assert whole.keys() == batched.keys()
    for k in whole:
        torch.testing.assert_close(batched[k], whole[k])


def test_build_shapes_artifact_reports_its_heads_test_accuracy(tmp_path: Path) -> None:
    """The model card's numbers are the saved head's on the held-out set (artifact_dataset seed 1000): recall per
    kind on the artifact images (logit <= 0), clean accuracy on the clean ones (logit > 0), overall their mean."""
    from imgalign.rewards.artifact import build_shapes_artifact

    res = build_shapes_artifact(tmp_path, n=21, test_n=14, hidden=3)
    head, _ = load_head(tmp_path / "head.safetensors", task="artifact")
    assert head.hidden == 3 and res["hidden"] == 3  # the head it fits has the hidden size it is given
    enc = build_features("stats")
    tc, ta, kinds = artifact_dataset(14, seed=1000)
    with torch.no_grad():
        pc, pa = (head(enc(tc)) > 0).float(), (head(enc(ta)) <= 0).float()
    assert res["test_clean_accuracy"] == pytest.approx(float(pc.mean()))
    assert res["test_accuracy"] == pytest.approx(float(torch.cat([pc, pa]).mean()))
    want = {k: float(pa[[i for i, kk in enumerate(kinds) if kk == k]].mean()) for k in ARTIFACT_KINDS}
    assert res["test_artifact_recall_per_kind"] == pytest.approx(want)
    assert f"accuracy **{res['test_accuracy']:.3f}**" in (tmp_path / "README.md").read_text()
    assert res["n_train_per_class"] == 21 and res["features"] == "stats"


def test_build_shapes_artifact_tests_its_head_on_the_features_it_was_fitted_on(tmp_path: Path) -> None:
    """features=shapes-clip: the held-out accuracy is measured on shapes-clip features too (not stats ones)."""
    from imgalign.rewards.artifact import build_shapes_artifact

    res = build_shapes_artifact(tmp_path, n=7, features="shapes-clip", test_n=7, hidden=0)
    head, meta = load_head(tmp_path / "head.safetensors", task="artifact")
    assert meta["features"] == "shapes-clip" and res["features"] == "shapes-clip"
    tc, _, _ = artifact_dataset(7, seed=1000)
    with torch.no_grad():
        pc = (head(build_features("shapes-clip")(tc)) > 0).float()
    assert res["test_clean_accuracy"] == pytest.approx(float(pc.mean()))


def test_stats_features_shape_and_determinism() -> None:
    x = torch.rand(4, 3, 64, 64)
    f = image_stats(x)
    enc = build_features("stats")
    assert f.shape == (4, enc.dim) and torch.isfinite(f).all()
    assert torch.equal(enc(x), f)
    # parameter-free: a bf16 reward's stats encoder still reads the images in float32
    assert torch.equal(build_features("stats", dtype=torch.bfloat16)(x), f)
    # pixels outside [0, 1] (an unclamped sample) count as the nearest valid value, as in a saved image
    assert torch.equal(image_stats(x * 1.6 - 0.3), image_stats((x * 1.6 - 0.3).clamp(0, 1)))
    with pytest.raises(ValueError, match="valid: stats"):
        build_features("nope")
    with pytest.raises(ValueError, match="valid: stats"):  # no path: refused by name, not an IndexError
        build_features("dinov2")
    # a non-square image (the Fourier radius grid is [H, W]): band shares still sum to 1
    assert image_stats(torch.rand(2, 3, 16, 48))[:, 51:57].exp().sum(1).tolist() == pytest.approx([1.0, 1.0])


def test_online_discriminator_with_patch_tokens(tmp_path: Path) -> None:
    """Adv-GRPO variant on a tiny DINOv2: reward = 0.7 logit(CLS) + 0.3 mean patch logit, trained on both."""
    from test_rewards_tiny import make_tiny_dinov2

    d = make_tiny_dinov2(tmp_path / "dino")
    spec = f"discriminator:features=dinov2:{d},ref_size=16,hidden=8,loss=hinge,patch_weight=0.3,n_patches=4"
    r = build_reward(spec)
    x = torch.rand(3, 3, 64, 64)
    tok = r.encoder.tokens(x)  # (3, 1 + 16, 32)
    assert tok.shape == (3, 17, 32)
    with torch.no_grad():
        manual = 0.7 * r.head(tok[:, 0]) + 0.3 * r.head(tok[:, 1:].flatten(0, 1)).view(3, 16).mean(1)
    assert torch.allclose(r(x, [""] * 3).scores, manual, atol=1e-5)
    # standardised on the reference images' CLS tokens and their sampled patch tokens together
    ref = torch.cat([r.pos_pool, r.pos_patches.flatten(0, 1)])
    torch.testing.assert_close(r.head.mean, ref.mean(0))
    torch.testing.assert_close(r.head.std, ref.std(0).clamp(min=1e-4))
    before = [p.clone() for p in r.head.parameters()]
    metrics = r.update(x)
    assert all(not torch.equal(a, b) for a, b in zip(before, r.head.parameters()))
    assert set(metrics) == {"disc/loss", "disc/acc", "disc/logit_fake"}
    with pytest.raises(ValueError, match="patch tokens"):
        build_reward("discriminator:features=stats,ref_size=8,patch_weight=0.3")


def test_patch_subsets_are_random_distinct_tokens_per_image() -> None:
    """_some_patches draws n_patches distinct tokens per image, a different draw for each image (not the first k)."""
    r = build_reward("discriminator:features=stats,ref_size=8,hidden=4,n_patches=4")
    patches = torch.arange(40.0).view(2, 20, 1)  # token j of image b holds 20 b + j
    got = r._some_patches(patches)[..., 0]  # (2, 4)
    assert got.shape == (2, 4)
    for b in range(2):
        assert len(set(got[b].tolist())) == 4 and all(20 * b <= v < 20 * b + 20 for v in got[b].tolist())
    assert (got[1] - 20).tolist() != got[0].tolist() and got[0].tolist() != [0.0, 1.0, 2.0, 3.0]


def test_online_discriminator_patch_loss_is_weighted_by_patch_weight(tmp_path: Path) -> None:
    """The update's loss is loss(CLS) + w x loss(patches): heads built alike (same init, draws and
    normalisation) differing only in w report losses on a line in w with slope loss(patches) > 0 (hinge on a
    fresh head)."""
    from test_rewards_tiny import make_tiny_dinov2

    d = make_tiny_dinov2(tmp_path / "dino")
    x = torch.rand(3, 3, 64, 64)
    spec = f"discriminator:features=dinov2:{d},ref_size=8,hidden=8,loss=hinge,n_patches=4,patch_weight="
    loss = [build_reward(spec + w).update(x)["disc/loss"] for w in ("0.3", "0.6", "0.9")]
    assert loss[1] - loss[0] > 0.1
    assert loss[2] - loss[1] == pytest.approx(loss[1] - loss[0], rel=1e-4)


def test_online_discriminator_takes_steps_optimiser_steps_per_update() -> None:
    """steps=2 is two optimiser steps on the same batch: one steps=1 update, then another with the generator
    rewound (the same positives), ends at the same head."""
    x = torch.rand(8, 3, 64, 64)
    spec = "discriminator:features=stats,online=true,ref_size=64,hidden=16,lr=0.01,steps="
    two, one = build_reward(spec + "2"), build_reward(spec + "1")
    two.update(x)
    g = one.gen.get_state()
    one.update(x)
    assert not all(torch.equal(a, b) for a, b in zip(two.head.parameters(), one.head.parameters()))
    one.gen.set_state(g)
    one.update(x)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(two.head.parameters(), one.head.parameters()))


def test_online_update_loss_is_the_head_loss_on_drawn_positives_and_the_batch() -> None:
    """One update's metrics are head_loss (before the step) on a seeded draw of reference positives (with
    replacement, from the reward's generator) against the batch's features as negatives."""
    import copy

    from imgalign.rewards.heads import head_loss

    r = build_reward("discriminator:features=stats,ref_size=32,hidden=8,loss=hinge")
    x = shapes_reference_images(6, seed=9) * 0.5
    head, g = copy.deepcopy(r.head), torch.Generator()
    g.set_state(r.gen.get_state())
    idx = torch.randint(0, 32, (6,), generator=g)
    with torch.no_grad():
        lp, ln = head(r.pos_pool[idx]), head(r.encoder(x))
    m = r.update(x)
    assert m["disc/loss"] == pytest.approx(head_loss(lp, ln, "hinge").item(), rel=1e-5)
    assert m["disc/logit_fake"] == pytest.approx(ln.mean().item(), rel=1e-5, abs=1e-6)
    assert m["disc/acc"] == pytest.approx(((lp > 0).float().mean() + (ln <= 0).float().mean()).item() / 2)


def test_a_fresh_online_head_does_not_depend_on_the_global_rng_and_a_state_names_its_features() -> None:
    spec = "discriminator:features=stats,ref_size=8,hidden=8"
    torch.manual_seed(1)
    a = build_reward(spec)
    torch.manual_seed(2)
    b = build_reward(spec)
    assert all(torch.equal(x, y) for x, y in zip(a.head.state_dict().values(), b.head.state_dict().values()))
    other = build_reward("discriminator:features=shapes-clip,ref_size=8,hidden=8")
    with pytest.raises(ValueError, match="the saved state uses features 'stats'"):
        other.load_state_dict(a.state_dict())


def test_a_resumed_untrained_online_discriminator_is_not_ready() -> None:
    """A state saved before the first update() resumes a head that still scores noise: ready() stays False; a
    state saved after an update (or an older one without the flag) is ready."""
    spec = "discriminator:features=stats,online=true,ref_size=16,hidden=8"
    fresh = build_reward(spec)
    state = fresh.state_dict()
    resumed = build_reward(spec)
    resumed.load_state_dict(state)
    assert not fresh.ready() and not resumed.ready()
    fresh.update(torch.rand(4, 3, 64, 64))
    resumed.load_state_dict(fresh.state_dict())
    assert resumed.ready()
    old = build_reward(spec)
    old.load_state_dict({k: v for k, v in state.items() if k != "trained"})
    assert old.ready()


def test_online_discriminator_resumes_exactly() -> None:
    """state_dict carries the generator that draws positives and patch subsets: a resumed head trains on exactly
    as the uninterrupted one."""
    import torch

    from imgalign.rewards.base import build_reward

    torch.manual_seed(0)

    def make():
        return build_reward("discriminator:features=stats,online=true,ref_size=64,hidden=16,lr=0.01")

    batches = [torch.rand(8, 3, 64, 64) for _ in range(4)]
    a = make()
    for i, bt in enumerate(batches):
        a.update(bt)
        if i == 1:
            state = a.state_dict()
    b = make()
    b.load_state_dict(state)
    for bt in batches[2:]:
        b.update(bt)
    assert all(torch.equal(pa, pb) for pa, pb in zip(a.head.parameters(), b.head.parameters()))


def test_a_resumed_online_discriminator_keeps_this_runs_lr_and_refuses_another_shape() -> None:
    """The saved optimizer carried its learning rate, so lr= changed on resume was silently ignored; a saved head
    of another hidden size was torch's raw size-mismatch traceback."""
    import pytest
    import torch

    from imgalign.rewards.base import build_reward

    spec = "discriminator:features=stats,online=true,ref_size=64,hidden=16,lr={lr}"
    a = build_reward(spec.format(lr=0.01))
    a.update(torch.rand(8, 3, 64, 64))
    b = build_reward(spec.format(lr=0.5))
    b.load_state_dict(a.state_dict())
    assert [g["lr"] for g in b.opt.param_groups] == [0.5]
    c = build_reward(spec.format(lr=0.01).replace("hidden=16", "hidden=8"))
    with pytest.raises(ValueError, match=r"does not fit this one's shape .*resume with the options it was"):
        c.load_state_dict(a.state_dict())


def test_stats_features_of_an_image_below_3x3_are_refused_naming_the_size() -> None:
    """A 1x1 image (a tracking pixel, a thumbnail) got torch's 'Kernel size can't be greater than actual input
    size' from the Laplacian; the error now says what the stats features need."""
    assert image_stats(torch.rand(1, 3, 3, 3)).shape[0] == 1
    with pytest.raises(ValueError, match="at least 3x3 pixels, not 1x1"):
        image_stats(torch.rand(2, 3, 1, 1))
    for h, w in ((2, 8), (8, 2)):  # either side below 3
        with pytest.raises(ValueError, match=f"at least 3x3 pixels, not {w}x{h}"):
            image_stats(torch.rand(1, 3, h, w))


def test_stats_histograms_of_a_constant_colour_by_hand() -> None:
    """Colour (1, 0.5, 0.5): 8 triangular bins with centres k/7 on [0, 1] put 1 and 0.5 at a centre (bin 7) and
    halfway between bins 3 and 4; saturation (max - min) / max = 0.5 and value max = 1 likewise. Rows sum to 1."""
    x = torch.tensor([1.0, 0.5, 0.5]).view(1, 3, 1, 1).expand(1, 3, 16, 16)
    f = image_stats(x)[0]
    half = [0.0, 0.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.0]
    one = [0.0] * 7 + [1.0]
    for lo, want in [(0, one), (8, half), (16, half), (24, half), (32, one)]:  # R, G, B, saturation, value
        assert f[lo : lo + 8].tolist() == pytest.approx(want, abs=1e-5)


def test_stats_gradient_and_laplacian_of_a_checkerboard_by_hand() -> None:
    """A 0/1 checkerboard: every gradient is sqrt(1 + 1), log10 0.151 past the last centre 0 of the [-3, 0]
    histogram, weight 1 - 0.151 / (3 / 7); the Laplacian is 4 everywhere at full scale and 0 once 2 x 2 average
    pooling has made the image flat (log(4 + 1e-4), then log(1e-4) twice)."""
    i = torch.arange(16)
    x = ((i[:, None] + i[None, :]) % 2).float().expand(1, 3, 16, 16)
    f = image_stats(x)[0]
    w = 1 - math.log10(math.sqrt(2) + 1e-3) / (3 / 7)
    assert f[40:48].tolist() == pytest.approx([0.0] * 7 + [w], abs=1e-5)
    assert f[48:51].tolist() == pytest.approx([math.log(4 + 1e-4), math.log(1e-4), math.log(1e-4)], abs=1e-4)
    # the coarser scales are the full-scale Laplacian energy of the 2 x 2 and 4 x 4 averaged image
    torch.manual_seed(0)
    r = torch.rand(1, 3, 32, 32)
    coarse = [image_stats(F.avg_pool2d(r, k))[0, 48].item() for k in (2, 4)]
    assert image_stats(r)[0, 49:51].tolist() == pytest.approx(coarse, abs=1e-5)
    # 16 x 16: the 8 x 8 image is pooled once more (min side >= 8), so the third scale is the 4 x 4 average
    r = torch.rand(1, 3, 16, 16)
    coarse = [image_stats(F.avg_pool2d(r, k))[0, 48].item() for k in (2, 4)]
    assert image_stats(r)[0, 49:51].tolist() == pytest.approx(coarse, abs=1e-5)


def test_stats_gradient_features_use_the_mean_of_the_three_channels() -> None:
    """A 0/1 checkerboard in ONE channel (the others 0): the grey image (channel mean) is a 0/1/3 checkerboard, so
    the full-scale Laplacian energy is 4/3 whichever channel carries it (log(4/3 + 1e-4)); every gradient is
    sqrt(2)/3, log10 -0.326 in the [-3, 0] histogram: between the centres -3/7 and 0 (bins 6 and 7)."""
    i = torch.arange(16)
    board = ((i[:, None] + i[None, :]) % 2).float()
    t = (math.log10(math.sqrt(2) / 3 + 1e-3) + 3) / (3 / 7)  # position in bin units
    want = [0.0] * 8
    want[int(t)], want[int(t) + 1] = 1 - (t - int(t)), t - int(t)
    for c in range(3):
        x = torch.zeros(1, 3, 16, 16)
        x[0, c] = board
        f = image_stats(x)[0]
        assert f[48].item() == pytest.approx(math.log(4 / 3 + 1e-4), abs=1e-4), c
        assert f[40:48].tolist() == pytest.approx(want, abs=1e-4), c


def test_stats_fourier_features_of_a_sinusoid_by_hand() -> None:
    """0.5 + a cos(2 pi k x / W) on 32 x 32, k = 12: after removing the mean, all the energy 2 (a H W / 2)^2 is at
    (0, +-k), radius k / (hypot(H, W) / 2) = 0.53, the 4th of 6 bands on [0, 1]; the peak-to-mean ratio over the
    N pixels beyond radius 0.25 is N / 2. Band shares of any image sum to 1 (the corners, radius 1, included)."""
    h = w = 32
    k, a = 12, 0.25
    x = (0.5 + a * torch.cos(2 * math.pi * k * torch.arange(w) / w)).expand(1, 3, h, w)
    f = image_stats(x)[0]
    bands = f[51:57].exp()
    assert bands.tolist() == pytest.approx([0, 0, 0, 1, 0, 0], abs=1e-5)
    yy, xx = torch.meshgrid(torch.arange(h) - h // 2, torch.arange(w) - w // 2, indexing="ij")
    n_high = int(((yy**2 + xx**2).float().sqrt() > 0.25 * math.hypot(h, w) / 2).sum())
    assert f[57].item() == pytest.approx(math.log(n_high / 2), abs=1e-4)
    assert f[58].item() == pytest.approx(math.log(2 * (a * h * w / 2) ** 2) / 10, abs=1e-5)
    torch.manual_seed(0)
    shares = image_stats(torch.rand(2, 3, h, w))[:, 51:57].exp().sum(1)
    assert shares.tolist() == pytest.approx([1.0, 1.0], abs=1e-6)


def test_feature_encoders_take_an_empty_batch() -> None:
    assert build_features("stats")(torch.zeros(0, 3, 16, 16)).shape == (0, build_features("stats").dim)


def test_a_logit_of_zero_is_negative_and_one_image_gets_one_logit() -> None:
    """accuracy counts a logit of exactly 0 as a negative on both sides (a positive at 0 is wrong); a batch of one
    image gives logits of shape (1,), not a 0-d tensor (scoring a single image iterates over them)."""
    from imgalign.rewards.heads import accuracy

    head = FeatureHead(1)
    with torch.no_grad():
        head.net[0].weight.fill_(1.0)
        head.net[0].bias.zero_()
    zero = torch.zeros(1, 1)
    assert accuracy(head, zero, zero) == pytest.approx(1 / 2)
    assert head(zero).shape == (1,) and FeatureHead(3, hidden=4)(torch.randn(1, 3)).shape == (1,)
    r = build_reward("discriminator:features=stats,ref_size=8,hidden=4")
    out = r(torch.rand(1, 3, 64, 64), [""])
    assert out.scores.shape == (1,) and len(out.details) == 1


def test_a_negative_hidden_size_is_named_before_any_fitting() -> None:
    """fit_head(hidden=-1) failed in nn.Linear with "negative dimension -1: [-1, 4]"."""
    from imgalign.rewards.heads import fit_head

    with pytest.raises(ValueError, match="hidden must be 0 \\(a linear head\\) or more, got -1"):
        fit_head(torch.randn(4, 4), torch.randn(4, 4), hidden=-1, epochs=1)


def test_discriminator_options_at_their_boundaries() -> None:
    """patch_weight is in [0, 1) (at 1 the CLS logit would drop out of the reward); clip must be > 0 (0 would
    make every clipped reward 0)."""
    with pytest.raises(ValueError, match=r"patch_weight must be in \[0, 1\), got 1.0"):
        build_reward("discriminator:features=stats,ref_size=8,patch_weight=1.0")
    with pytest.raises(ValueError, match="clip must be > 0 with reward=clipped, got 0"):
        build_reward("discriminator:features=stats,ref_size=8,reward=clipped,clip=0")


def test_an_online_discriminator_refuses_a_reference_pool_of_one_image(tmp_path: Path) -> None:
    """An online head standardises features by the reference pool's spread: one image (ref_size=1, or a ref folder
    holding one readable image) made it NaN, so training ran with every reward masked as non-finite."""
    with pytest.raises(ValueError, match="ref_size must be a number >= 2, got 1"):
        build_reward("discriminator:features=stats,online=true,ref_size=1")
    one = write_folder(tmp_path / "one", shapes_reference_images(1))
    with pytest.raises(
        ValueError, match=r"ref='.*one' holds 1 readable image; online training needs at least 2"
    ):
        build_reward(f"discriminator:features=stats,online=true,ref={one}")
    (one / "b.heic").write_bytes(b"x")  # a photo of a suffix not read is named
    with pytest.raises(
        ValueError, match=r"holds 1 readable image \(it holds 1 other file\(s\), e.g. 'b.heic'"
    ):
        build_reward(f"discriminator:features=stats,online=true,ref={one}")
    two = write_folder(tmp_path / "two", shapes_reference_images(2))
    r = build_reward(f"discriminator:features=stats,online=true,ref={two},hidden=4")
    assert torch.isfinite(r(shapes_reference_images(2, seed=1), ["", ""]).scores).all()


def test_fit_head_trains_with_the_loss_it_is_given_and_load_head_wants_a_head_file(tmp_path: Path) -> None:
    """fit_head's loss= reaches the training step (hinge and bce fit different heads from the same start); a
    safetensors file that is not a feature head (no kind tag) is refused by name."""
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(2)
    pos, neg = torch.randn(10, 3, generator=g) + 1, torch.randn(10, 3, generator=g)
    bce = fit_head(pos, neg, epochs=3, val_frac=0.0).head.net[0].weight
    hinge = fit_head(pos, neg, epochs=3, val_frac=0.0, loss="hinge").head.net[0].weight
    assert not torch.allclose(bce, hinge)
    save_file({"mean": torch.zeros(3)}, str(tmp_path / "x.safetensors"), metadata={"task": "artifact"})
    with pytest.raises(ValueError, match="is not an imgalign feature head"):
        load_head(tmp_path / "x.safetensors")


def test_fit_discriminator_holds_out_the_val_frac_it_is_given(tmp_path: Path) -> None:
    """fit_discriminator passes val_frac on: 0 trains on every image and reports no val_acc."""
    from imgalign.rewards.discriminator import fit_discriminator

    real = write_folder(tmp_path / "real", shapes_reference_images(6, seed=1))
    fake = write_folder(tmp_path / "fake", degrade(shapes_reference_images(6, seed=2)))
    out = tmp_path / "d.safetensors"
    held = fit_discriminator(real, fake, "stats", out, hidden=0, epochs=2)
    full = fit_discriminator(real, fake, "stats", out, hidden=0, epochs=2, val_frac=0.0)
    assert "val_acc" in held and "val_acc" not in full


def test_a_smear_blurs_with_a_normalised_kernel() -> None:
    """A motion blur averages: a flat image comes out unchanged (an unnormalised kernel would brighten it)."""
    x = torch.full((3, 32, 32), 0.4)
    torch.testing.assert_close(add_artifact(x, "smear", random.Random(0)), x)


def test_artifact_edges_mark_both_horizontal_and_vertical_colour_changes() -> None:
    """_edges marks a pixel whose grey level differs from its left or upper neighbour by more than 0.05: a bright
    square at rows/columns 4..7 of a black 12 x 12 image has its edges at rows/columns 4 and 8."""
    from imgalign.rewards.artifact import _edges

    x = torch.zeros(3, 12, 12)
    x[:, 4:8, 4:8] = 1.0
    want = torch.zeros(12, 12)
    want[4:8, 4] = want[4:8, 8] = 1  # vertical edges (change along a row)
    want[4, 4:8] = want[8, 4:8] = 1  # horizontal edges (change along a column)
    assert torch.equal(_edges(x), want)


def _square(colour: tuple[float, float, float], size: int = 32) -> torch.Tensor:
    """A coloured 12 x 12 square on a black (3, size, size) background."""
    x = torch.zeros(3, size, size)
    x[:, 10:22, 10:22] = torch.tensor(colour).view(3, 1, 1)
    return x


def test_broken_edges_replace_widened_edge_chunks_by_the_background_only() -> None:
    """broken_edges paints the background colour over chunks of the edges widened by one pixel: every changed
    pixel becomes the background (black) and lies within one pixel of an edge, and some lie beside, not on, it."""
    from imgalign.rewards.artifact import _edges

    x = _square((1.0, 0.5, 0.25))
    e = _edges(x)
    near = F.max_pool2d(e[None, None], 3, 1, 1)[0, 0].bool()
    for seed in range(4):
        y = add_artifact(x, "broken_edges", random.Random(seed))
        changed = (y != x).any(0)
        assert changed.any() and (y[:, changed] == 0).all()
        assert not (changed & ~near).any() and (changed & ~e.bool()).any()


def test_doubled_edges_add_a_spatially_shifted_dimmer_ghost() -> None:
    """The ghost is the image shifted in space (not across channels) and dimmed: a red square gains red pixels
    beside it, never green or blue, and no pixel gets darker or reaches full brightness where it was black."""
    x = _square((1.0, 0.0, 0.0))
    for seed in range(4):
        y = add_artifact(x, "doubled_edges", random.Random(seed))
        assert (y[1:] == 0).all() and (y >= x).all()
        ghost = (y[0] > 0) & (x[0] == 0)
        assert ghost.any() and (y[0, ghost] >= 0.45).all() and (y[0, ghost] <= 0.7).all()


def test_colour_bleed_and_oversaturation_push_a_flat_colour_away_from_grey() -> None:
    """On a flat colour, colour_bleed scales its chroma (colour minus grey) by 1.2..1.8 around the same grey, and
    oversaturate scales it by 1.8..2.6 and brightens by 1.1..1.3: both keep red above green above blue."""
    c = torch.tensor([0.5, 0.45, 0.4])  # grey 0.45, chroma (0.05, 0, -0.05)
    x = c.view(3, 1, 1).expand(3, 16, 16).clone()
    for seed in range(4):
        y = add_artifact(x, "colour_bleed", random.Random(seed))
        red = y[0] - 0.45
        assert (red >= 1.2 * 0.05 - 1e-6).all() and (red <= 1.8 * 0.05 + 1e-6).all()
        torch.testing.assert_close(y.mean(0), torch.full((16, 16), 0.45))
        z = add_artifact(x, "oversaturate", random.Random(seed))
        assert (z[0] > z[1]).all() and (z[1] > z[2]).all()
        assert ((z[0] - z[2]) >= 1.8 * 1.1 * 0.1 - 1e-6).all()


def test_fit_artifact_passes_its_options_on(tmp_path: Path) -> None:
    """fit_artifact hands hidden, epochs, lr and val_frac to fit_head and the extra metadata to the head file: lr=0
    leaves the head where it started whatever the epochs; val_frac=0 reports no held-out accuracy."""
    from imgalign.rewards.artifact import fit_artifact

    clean, art, _ = artifact_dataset(8, seed=2)
    out = tmp_path / "a.safetensors"

    def fit(**kw: object) -> tuple[dict[str, float], torch.Tensor]:
        m = fit_artifact(clean, art, "stats", out, **kw)
        head, meta = load_head(out, task="artifact")
        return m, torch.cat([p.flatten() for p in head.parameters()]), meta

    m, w1, meta = fit(hidden=4, epochs=1, val_frac=0.0, extra={"who": "me"})
    assert "val_acc" not in m and meta["hidden"] == "4" and meta["extra"]["who"] == "me"
    assert meta["extra"]["metrics"] == m
    _, w3, _ = fit(hidden=4, epochs=3, val_frac=0.0)
    assert not torch.equal(w1, w3)
    _, z1, _ = fit(hidden=4, epochs=1, lr=0.0)
    _, z3, _ = fit(hidden=4, epochs=3, lr=0.0)
    torch.testing.assert_close(z1, z3)
    assert "val_acc" in fit(hidden=0, epochs=1)[0]


def test_the_artifact_reward_encodes_with_the_features_its_head_names(tmp_path: Path) -> None:
    """A head fitted on shapes-clip features is scored on shapes-clip features (the head file names them), and the
    reward is log sigmoid of the head's logit."""
    from imgalign.rewards.artifact import fit_artifact

    clean, art, _ = artifact_dataset(4, seed=6)
    out = tmp_path / "clip_head.safetensors"
    fit_artifact(clean, art, "shapes-clip", out, epochs=1, val_frac=0.0)
    r = build_reward(f"artifact:model={out}")
    assert r.encoder.name == "shapes-clip"
    head, _ = load_head(out, task="artifact")
    with torch.no_grad():
        want = F.logsigmoid(head(build_features("shapes-clip")(art)))
    torch.testing.assert_close(r(art, [""] * 4).scores, want)


def test_bce_is_a_per_class_mean_and_clipped_details_keep_the_raw_logit() -> None:
    """bce = mean softplus(−l_pos) + mean softplus(l_neg) (each class a mean, not a sum); with reward=clipped the
    details report the unclipped logit."""
    lp, ln = torch.tensor([0.0]), torch.tensor([0.0, 0.0, 0.0])
    assert head_loss(lp, ln, "bce").item() == pytest.approx(2 * math.log(2), rel=1e-5)
    r = build_reward("discriminator:features=stats,ref_size=8,hidden=0,reward=clipped,clip=0.01")
    with torch.no_grad():
        r.head.net[0].bias.fill_(5.0)
    out = r(torch.rand(2, 3, 64, 64), ["", ""])
    assert out.scores.tolist() == pytest.approx([0.01, 0.01])
    assert all(abs(d["logit"]) > 0.5 for d in out.details)


def test_discriminator_options_are_checked_by_name_before_any_training() -> None:
    """A misspelt reward/loss, a negative hidden size or a non-boolean online= is refused, not run with."""
    for spec, match in (
        ("reward=logits", "reward must be 'logit' or 'clipped'"),
        ("loss=mse", "valid: bce, hinge"),
        ("hidden=-1", "hidden must be a number >= 0"),
        ("online=yes", "online must be true or false"),
    ):
        with pytest.raises(ValueError, match=match):
            build_reward(f"discriminator:features=stats,ref_size=8,{spec}")


def test_fit_head_is_plain_full_batch_adamw_with_fresh_gradients_each_epoch() -> None:
    """fit_head with val_frac=0 equals a hand-written AdamW loop (zero_grad, bce, step) from the same seeded start."""
    g = torch.Generator().manual_seed(3)
    pos, neg = torch.randn(6, 2, generator=g) + 1, torch.randn(6, 2, generator=g)
    got = fit_head(pos, neg, epochs=4, lr=0.1, val_frac=0.0, seed=4).head
    torch.manual_seed(4)
    head = FeatureHead(2, 0)
    head.set_normalisation(torch.cat([pos, neg]))
    opt = torch.optim.AdamW(head.parameters(), lr=0.1, weight_decay=1e-3)
    for _ in range(4):
        opt.zero_grad()
        head_loss(head(pos), head(neg)).backward()
        opt.step()
    for a, b in zip(got.parameters(), head.parameters()):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_fit_discriminator_trains_with_the_lr_it_is_given(tmp_path: Path) -> None:
    """fit_discriminator passes lr on (fit_head's own default is another): two lrs fit two different heads."""
    from imgalign.rewards.discriminator import fit_discriminator

    real = write_folder(tmp_path / "real", shapes_reference_images(6, seed=1))
    fake = write_folder(tmp_path / "fake", degrade(shapes_reference_images(6, seed=2)))
    heads = []
    for lr in (1e-3, 1e-2):
        fit_discriminator(real, fake, "stats", tmp_path / f"{lr}.safetensors", hidden=0, epochs=2, lr=lr)
        heads.append(load_head(tmp_path / f"{lr}.safetensors")[0].net[0].weight)
    assert not torch.allclose(heads[0], heads[1])


def test_reference_patch_subsets_never_hold_the_cls_token(tmp_path: Path) -> None:
    """The reference pool's patch subsets are drawn from the patch tokens only (token 0 is the CLS)."""
    from test_rewards_tiny import make_tiny_dinov2

    from imgalign.rewards.discriminator import reference_pool

    d = make_tiny_dinov2(tmp_path / "dino")
    r = build_reward(f"discriminator:features=dinov2:{d},ref_size=8,hidden=4,patch_weight=0.3,n_patches=16")
    tok = r.encoder.tokens(reference_pool("shapes", 8))  # (8, 1 + 16, D)
    torch.testing.assert_close(r.pos_pool, tok[:, 0])
    for b in range(8):
        got = sorted(map(tuple, r.pos_patches[b].tolist()))
        assert got == sorted(map(tuple, tok[b, 1:].tolist()))  # the 16 patch tokens, in a random order


def test_online_training_from_a_fitted_head_starts_from_that_head(tmp_path: Path) -> None:
    """head=FILE with online=true keeps training the fitted head (its weights and normalisation), not a fresh one."""
    from imgalign.rewards.discriminator import fit_discriminator

    real = write_folder(tmp_path / "real", shapes_reference_images(6, seed=1))
    fake = write_folder(tmp_path / "fake", degrade(shapes_reference_images(6, seed=2)))
    out = tmp_path / "d.safetensors"
    fit_discriminator(real, fake, "stats", out, hidden=4, epochs=2)
    r = build_reward(f"discriminator:head={out},online=true,ref_size=8")
    fitted = load_head(out)[0].state_dict()
    assert r.online and all(torch.equal(v, fitted[k]) for k, v in r.head.state_dict().items())


def test_a_missing_head_file_is_said_not_to_exist(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_head(tmp_path / "nope.safetensors")
    # a quoted ~ (artifact:model=~/h.safetensors in a YAML config) was "does not exist" of a file that may
    with pytest.raises(
        FileNotFoundError, match=r"'~/h.safetensors' does not exist \(a quoted ~ is not expanded"
    ):
        load_head("~/h.safetensors")


def test_fit_head_holds_out_a_split_drawn_with_its_seed() -> None:
    """The train/val split follows seed=: with no training (epochs=0) the head's normalisation is the mean of the
    training rows that a permutation from a generator seeded with that seed leaves (each class drawn in turn)."""
    pos, neg = torch.arange(10.0)[:, None], 100 + torch.arange(10.0)[:, None]
    for seed in (3, 7):
        g = torch.Generator().manual_seed(seed)
        ip, ineg = torch.randperm(10, generator=g), torch.randperm(10, generator=g)
        want = torch.cat([pos[ip[2:]], neg[ineg[2:]]]).mean(0)
        got = fit_head(pos, neg, epochs=0, val_frac=0.2, seed=seed).head.mean
        torch.testing.assert_close(got, want)


def test_a_reference_folder_pool_holds_ref_size_images(tmp_path: Path) -> None:
    """ref=FOLDER reads at most ref_size of its images into the positive pool."""
    from imgalign.rewards.discriminator import reference_pool

    folder = write_folder(tmp_path / "ref", shapes_reference_images(5, seed=1))
    assert reference_pool(str(folder), 3).shape[0] == 3
    r = build_reward(f"discriminator:features=stats,ref={folder},ref_size=3,hidden=4")
    assert r.pos_pool.shape[0] == 3


def test_a_reference_folder_is_encoded_a_batch_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The online discriminator read its ref=FOLDER pool's pixels at once (512 photos of 1024x1024 are 6.4 GB as
    float32); it encodes them a batch at a time, into the features the whole pool gives, the first ref_size files."""
    from imgalign.rewards import io

    folder = write_folder(tmp_path / "ref", shapes_reference_images(7, seed=1))
    whole = build_features("stats")(io.load_image_folder(folder, limit=6))
    batches: list[int] = []
    encode = io.encode_image_folder

    def small_batches(path, enc, size=None, batch_size=64, limit=None):
        return encode(path, lambda x: batches.append(x.shape[0]) or enc(x), size, batch_size=4, limit=limit)

    monkeypatch.setattr(io, "encode_image_folder", small_batches)
    monkeypatch.setattr(
        io, "load_image_folder", lambda *args, **kwargs: pytest.fail("the whole pool was loaded")
    )
    r = build_reward(f"discriminator:features=stats,ref={folder},ref_size=6,hidden=4")
    assert batches == [4, 2]
    torch.testing.assert_close(r.pos_pool, whole)


def test_online_patch_update_loss_pairs_drawn_positives_with_their_patches(tmp_path: Path) -> None:
    """With patch tokens the update's loss is loss(CLS) + w x loss(patches), where the positive patches are those
    of the drawn reference images (pos_patches[idx]) and the negative ones the batch's patch tokens only (not its
    CLS). n_patches = P keeps every patch, so the order drawn does not matter to the per-class means."""
    import copy

    from test_rewards_tiny import make_tiny_dinov2

    d = make_tiny_dinov2(tmp_path / "dino")
    spec = f"discriminator:features=dinov2:{d},ref_size=8,hidden=8,loss=hinge,patch_weight=0.3,n_patches=16"
    r = build_reward(spec)
    x = torch.rand(3, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    head, g = copy.deepcopy(r.head), torch.Generator()
    g.set_state(r.gen.get_state())
    tok = r.encoder.tokens(x)  # (3, 1 + 16, D)
    torch.rand(3, 16, generator=g)  # the negatives' patch draw
    idx = torch.randint(0, 8, (3,), generator=g)
    assert idx.tolist() != [0, 1, 2]
    with torch.no_grad():
        want = head_loss(head(r.pos_pool[idx]), head(tok[:, 0]), "hinge") + 0.3 * head_loss(
            head(r.pos_patches[idx].flatten(0, 1)), head(tok[:, 1:].flatten(0, 1)), "hinge"
        )
    assert r.update(x)["disc/loss"] == pytest.approx(want.item(), rel=1e-5)


def test_a_head_read_error_without_a_message_is_named_by_its_type():
    """An error with an empty message made `_reason` fail with an IndexError of its own."""
    from imgalign.rewards.heads import _reason

    assert _reason(OSError()) == "OSError while reading it"
    assert _reason(ValueError("  \n ")) == "ValueError while reading it"
    assert _reason(ValueError("bad header.\nmore")) == "bad header (and 1 more)"

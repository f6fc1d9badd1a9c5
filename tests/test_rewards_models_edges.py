"""Edges of the model-based rewards (clip, discriminator, artifact, vlm_loglik) and their feature heads that the
main test files leave open (mutation round 11)."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from imgalign.rewards.artifact import add_artifact
from imgalign.rewards.base import build_reward
from imgalign.rewards.clip import cut_prompts
from imgalign.rewards.heads import FeatureHead, fit_head, load_head

torch.set_num_threads(1)


def test_a_tokenizer_with_encode_but_no_integer_context_is_not_judged() -> None:
    """Without an integer ``context_length`` (open_clip's Hugging Face tokenizers) the cut is not known: no prompt
    is named, and no comparison with None is attempted."""
    tok = SimpleNamespace(encode=lambda p: p.split(), context_length=None)
    assert cut_prompts(tok, ["a " * 100]) == []
    assert cut_prompts(SimpleNamespace(context_length=4), ["a " * 100]) == []  # no encode
    assert cut_prompts(SimpleNamespace(encode=lambda p: p.split(), context_length=4), ["a b", "a b c"]) == [1]


def test_an_mlp_head_is_linear_silu_linear_on_standardised_features() -> None:
    """hidden > 0: Linear -> SiLU -> Linear (the activation the shipped shapes-artifact head was trained with; a
    saved head scored with another activation gives other logits)."""
    torch.manual_seed(0)
    head = FeatureHead(3, hidden=5).eval()
    feats = torch.randn(7, 3) * 4 + 2
    head.set_normalisation(feats)
    first, last = head.net[0], head.net[3]
    z = (feats - feats.mean(0)) / feats.std(0)
    expected = last(F.silu(first(z))).squeeze(-1)
    torch.testing.assert_close(head(feats), expected)


def test_fit_head_names_a_class_with_one_example_before_blaming_val_frac() -> None:
    """One example of either class is refused as too few examples (giving both counts), not as a val_frac that
    leaves too few to train on (lowering val_frac would not help)."""
    for pos, neg in ((1, 5), (5, 1)):
        with pytest.raises(ValueError, match=f"need at least 2 examples per class, got {pos} and {neg}"):
            fit_head(torch.randn(pos, 3), torch.randn(neg, 3), epochs=1)


def test_discriminator_patch_count_and_online_reference_pool_size_are_refused_below_their_minimum() -> None:
    """n_patches=0 made every patch loss a mean over no tokens (disc/loss nan) and a negative n_patches silently
    kept all but that many patches; ref_size=0 failed with numpy's 'need at least one array to stack' (an online
    head needs 2 reference images, tests/test_rewards_heads.py). Each is refused by name when the reward is
    built."""
    for spec, match in (
        ("ref_size=8,n_patches=0", "n_patches must be a number >= 1, got 0"),
        ("ref_size=8,n_patches=-2", "n_patches must be a number >= 1, got -2"),
        ("ref_size=0", "ref_size must be a number >= 2, got 0"),
    ):
        with pytest.raises(ValueError, match=match):
            build_reward(f"discriminator:features=stats,{spec}")


def test_fit_head_refuses_a_val_frac_of_1_as_out_of_range() -> None:
    """val_frac is in [0, 1): 1 is named as out of range, not as leaving 0 examples to train on."""
    with pytest.raises(ValueError, match=r"val_frac must be in \[0, 1\), got 1.0"):
        fit_head(torch.randn(10, 3), torch.randn(10, 3), epochs=1, val_frac=1.0)


def test_fit_head_holds_out_the_rounded_share_of_each_class() -> None:
    """val_frac * n is rounded, not floored: 4 examples at val_frac=0.4 hold out 2 per class (1.6 -> 2), so the
    normalisation (epochs=0) is the mean of the 2 + 2 training rows the seeded permutations leave."""
    pos, neg = torch.arange(4.0)[:, None], 100 + torch.arange(4.0)[:, None]
    g = torch.Generator().manual_seed(3)
    ip, ineg = torch.randperm(4, generator=g), torch.randperm(4, generator=g)
    res = fit_head(pos, neg, epochs=0, val_frac=0.4, seed=3)
    torch.testing.assert_close(res.head.mean, torch.cat([pos[ip[2:]], neg[ineg[2:]]]).mean(0))


def test_fit_head_refuses_a_split_that_leaves_one_example_of_a_class_to_train_on() -> None:
    """3 positives at val_frac=0.5 hold out 2 (1.5 rounds to 2) and leave 1 to train on: refused, naming both
    training counts and the val_frac to lower."""
    with pytest.raises(ValueError, match="val_frac 0.5 leaves 1 and 5 examples to train on"):
        fit_head(torch.randn(3, 2), torch.randn(10, 2), epochs=1, val_frac=0.5)


def test_val_acc_is_reported_only_when_both_classes_hold_examples_out() -> None:
    """2 positives and 3 negatives at val_frac=0.2 hold out 0 and 1: an accuracy on the negatives alone is no
    held-out accuracy, so there is no val_acc."""
    g = torch.Generator().manual_seed(0)
    res = fit_head(torch.randn(2, 2, generator=g) + 2, torch.randn(3, 2, generator=g), epochs=1, val_frac=0.2)
    assert "val_acc" not in res.metrics and res.metrics["n_neg"] == 3.0


def test_fit_discriminator_seeds_its_fit_and_records_which_folder_was_real(tmp_path: Path) -> None:
    """seed= reaches fit_head (another seed, another split and start: another head; the same seed, the same head),
    and the saved head's metadata names the real and the fake folder each as what it was."""
    from test_rewards_heads import degrade, write_folder

    from imgalign.rewards.discriminator import fit_discriminator
    from imgalign.rewards.fid import shapes_reference_images

    real = write_folder(tmp_path / "real", shapes_reference_images(6, seed=1))
    fake = write_folder(tmp_path / "fake", degrade(shapes_reference_images(6, seed=2)))
    weights = []
    for i, seed in enumerate((1, 2, 1)):
        fit_discriminator(real, fake, "stats", tmp_path / f"{i}.safetensors", hidden=0, epochs=2, seed=seed)
        head, meta = load_head(tmp_path / f"{i}.safetensors", task="discriminator")
        weights.append(head.net[0].weight)
    assert meta["extra"]["real"] == str(real) and meta["extra"]["fake"] == str(fake)
    assert torch.equal(weights[0], weights[2]) and not torch.equal(weights[0], weights[1])


def test_clip_is_checked_only_for_the_clipped_reward_and_the_default_features_are_the_shapes_clip(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """clip= is read only with reward=clipped: with the logit reward clip=0 is no error; without head= or
    features= the online head sits on the shapes CLIP's features (the encoder asked for; stats stand in)."""
    from imgalign.rewards import features

    r = build_reward("discriminator:features=stats,ref_size=4,clip=0")
    assert r.reward_mode == "logit"
    asked = []
    stats = features.build_features("stats")
    monkeypatch.setattr(features, "build_features", lambda name, *a: asked.append(name) or stats)
    assert build_reward("discriminator:ref_size=2,hidden=0").features_name == "shapes-clip"
    assert asked == ["shapes-clip"]


def test_online_update_counts_a_fake_logit_of_zero_as_fake_in_its_accuracy() -> None:
    """disc/acc follows accuracy(): logit > 0 is real, logit <= 0 fake. A head at zero (lr=0 keeps it there)
    gives every image logit 0: the negatives are all right, the positives all wrong, acc = 0.5."""
    r = build_reward("discriminator:features=stats,ref_size=4,hidden=0,lr=0")
    with torch.no_grad():
        for p in r.head.parameters():
            p.zero_()
    metrics = r.update(torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(0)))
    assert metrics["disc/acc"] == 0.5 and metrics["disc/logit_fake"] == 0.0


def test_an_artifact_region_is_a_soft_ellipse_of_the_drawn_centre_and_half_axes() -> None:
    """_region_mask: centre in the middle 60% of each side, half-axes frac * side / 2 + 2 pixels; full strength
    out to d = 0.5 (d = the squared elliptical distance), fading linearly to 0 at d = 1.5."""
    from imgalign.rewards.artifact import _region_mask

    h, w = 40, 60
    mask = _region_mask(h, w, random.Random(3), (0.4, 0.6))
    rng = random.Random(3)
    cy, cx = rng.uniform(0.2, 0.8) * h, rng.uniform(0.2, 0.8) * w
    ry, rx = rng.uniform(0.4, 0.6) * h / 2 + 2, rng.uniform(0.4, 0.6) * w / 2 + 2
    yy, xx = torch.meshgrid(torch.arange(h).float(), torch.arange(w).float(), indexing="ij")
    d = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2
    assert (mask[d <= 0.5] == 1).all() and (mask[d >= 1.5] == 0).all()
    between = (d > 0.5) & (d < 1.5)
    torch.testing.assert_close(mask[between], 1.5 - d[between])


def test_noise_artifacts_draw_one_to_three_blotches(monkeypatch: pytest.MonkeyPatch) -> None:
    """kind=noise adds between 1 and 3 regions of noise (each count drawn for some seed)."""
    from imgalign.rewards import artifact

    calls: list[int] = []
    real = artifact._region_mask
    monkeypatch.setattr(artifact, "_region_mask", lambda *a: calls.append(1) or real(*a))
    counts = set()
    for seed in range(12):
        calls.clear()
        artifact.add_artifact(torch.rand(3, 16, 16), "noise", random.Random(seed))
        counts.add(len(calls))
    assert counts == {1, 2, 3}


def test_broken_edges_take_the_corner_median_as_background_and_a_grid_modulates_both_ways() -> None:
    """broken_edges paints the median of the top-left 2x2 corner (one odd corner pixel does not shift it, as a
    mean would); a grid texture adds +a and -a in a checkerboard, darkening as much as it brightens."""
    x = torch.full((3, 32, 32), 0.2)
    x[:, 10:22, 10:22] = 0.9
    x[:, 0, 0] = 1.0  # one odd pixel in the corner
    for seed in range(3):
        y = add_artifact(x, "broken_edges", random.Random(seed))
        changed = (y != x).any(0)
        assert changed.any() and torch.allclose(y[:, changed], torch.tensor(0.2))
    flat = torch.full((3, 16, 16), 0.5)
    for seed in range(3):
        y = add_artifact(flat, "grid", random.Random(seed))
        assert (y < 0.45).any() and (y > 0.55).any()
        assert abs(float((y - 0.5).mean())) < 0.02


def test_load_head_of_a_folder_is_no_head_file(tmp_path: Path) -> None:
    """A folder is not a head file: refused as such before safetensors is asked to open it (it was said not to
    exist); a missing file does not exist."""
    with pytest.raises(FileNotFoundError, match=r"head file .* is a folder; give the .safetensors file"):
        load_head(tmp_path)
    with pytest.raises(FileNotFoundError, match="head file .* does not exist"):
        load_head(tmp_path / "missing.safetensors")

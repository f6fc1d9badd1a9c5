"""Behaviour of the discriminator, its feature heads and the encoder-name helpers they use (features.py's
split_encoder_name, moved_encoder, recorded_encoder_gone, per_channel) that no test pinned (mutation round 16)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_rewards_heads import write_folder

from imgalign.rewards.features import per_channel, recorded_encoder_gone, split_encoder_name

torch.set_num_threads(1)


def _proc(**fields: object) -> object:
    """A stand-in image processor holding `fields` as attributes."""
    return type("P", (), fields)()


def test_a_real_folder_of_one_image_is_named_as_the_real_one(tmp_path: Path) -> None:
    """fit_discriminator names the class folder that is too small by its own flag (--real), not the other's."""
    from imgalign.rewards.discriminator import fit_discriminator

    g = torch.Generator().manual_seed(0)
    one = write_folder(tmp_path / "one", torch.rand(1, 3, 16, 16, generator=g))
    three = write_folder(tmp_path / "three", torch.rand(3, 3, 16, 16, generator=g))
    with pytest.raises(ValueError, match=rf"^--real {str(one)!r} holds 1 image\(s\)"):
        fit_discriminator(one, three, "stats", tmp_path / "h.safetensors", epochs=1)


def test_an_open_clip_checkpoint_name_splits_at_its_first_at_sign() -> None:
    """``open_clip:ARCH@PATH`` splits at the first '@' (a checkpoint path may hold one); ``open_clip:PATH`` without
    an architecture is all path."""
    assert split_encoder_name("open_clip:ViT-B-32@/m/a@b.pt") == ("open_clip:ViT-B-32@", "/m/a@b.pt")
    assert split_encoder_name("open_clip:/m/x.pt") == ("open_clip:", "/m/x.pt")


def test_a_recorded_hub_id_is_never_said_to_be_gone() -> None:
    """Only an absolute recorded folder can be gone: a Hub id (relative, not a folder here) gets no advice."""
    assert recorded_encoder_gone("dinov2:facebook/dinov2-small", "head h", "features") == ""
    assert recorded_encoder_gone("clip:openai/clip-vit-base-patch32", "head h", "features") == ""


def test_per_channel_reads_numbers_as_transformers_does_and_names_anything_else() -> None:
    """One number or three (numeric strings too) become three floats; a bool, words, or four numbers are named."""
    assert per_channel(_proc(image_std=["0.5", "0.25", 1]), "image_std", "x") == (0.5, 0.25, 1.0)
    assert per_channel(_proc(image_mean=2), "image_mean", "x") == (2.0, 2.0, 2.0)
    # a hand-edited "123" was read character by character as (1, 2, 3); "0.5" as one number is taken
    assert per_channel(_proc(image_mean="0.5"), "image_mean", "x") == (0.5, 0.5, 0.5)
    assert per_channel(_proc(image_mean="123"), "image_mean", "x") == (123.0, 123.0, 123.0)
    for bad in (True, ["a", "b", "c"], [0.1, 0.2, 0.3, 0.4], None, "abc"):
        with pytest.raises(
            ValueError, match=r"^m: its image processor's image_mean .* is not one number or three"
        ):
            per_channel(_proc(image_mean=bad), "image_mean", "m")


def test_per_channel_refuses_a_nan_mean_and_a_std_not_above_zero() -> None:
    """A hand-edited "nan" (read as a number since numeric strings are), or an image_std of 0, made every image's
    features NaN or inf."""
    for key, bad in (("image_mean", "nan"), ("image_mean", [0.5, float("inf"), 0.5]), ("image_std", 0)):
        with pytest.raises(ValueError, match=rf"^m: its image processor's {key} .* must be finite numbers"):
            per_channel(_proc(**{key: bad}), key, "m")
    with pytest.raises(ValueError, match=r"image_std \[0.2, -0.1, 0.2\] must be finite numbers above 0"):
        per_channel(_proc(image_std=[0.2, -0.1, 0.2]), "image_std", "m")
    assert per_channel(_proc(image_mean=0), "image_mean", "m") == (0.0, 0.0, 0.0)  # a zero mean is fine


def test_a_head_names_another_encoder_with_the_callers_advice_and_takes_a_relative_name_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """head_features: the same folder given relative to the working folder is the recorded encoder (returned as
    recorded); another encoder is refused with the caller's advice."""
    from imgalign.rewards.heads import head_features

    (tmp_path / "dino").mkdir()
    monkeypatch.chdir(tmp_path)
    recorded = f"dinov2:{tmp_path / 'dino'}"
    assert head_features(recorded, "dinov2:dino", "head h", "advice") == recorded
    with pytest.raises(
        ValueError,
        match=r"^head h was fitted on features 'stats', not 'shapes-clip'; do this \(the head's are used\)$",
    ):
        head_features("stats", "shapes-clip", "head h", "do this")


def test_a_fitted_head_holds_no_optimiser_and_its_state_carries_none(tmp_path: Path) -> None:
    """A frozen (fitted) head is never trained: the reward builds no optimiser, so its state has no 'opt' entry
    for an online run resumed from it to take up."""
    from imgalign.rewards.base import build_reward
    from imgalign.rewards.features import STATS_DIM
    from imgalign.rewards.heads import FeatureHead, save_head

    save_head(tmp_path / "h.safetensors", FeatureHead(STATS_DIM), "stats", "discriminator", {})
    r = build_reward(f"discriminator:head={tmp_path / 'h.safetensors'}")
    assert r.opt is None and set(r.state_dict()) == {"head", "features", "gen", "trained"}

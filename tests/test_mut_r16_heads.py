"""Behaviour of the discriminator, its feature heads and the encoder-name helpers they use (features.py's
split_encoder_name, moved_encoder, recorded_encoder_gone, per_channel) that no test pinned (mutation round 16)."""

from __future__ import annotations

import pytest
import torch

from imgalign.rewards.features import per_channel, recorded_encoder_gone, split_encoder_name

torch.set_num_threads(1)


def _proc(**fields: object) -> object:
    """A stand-in image processor holding `fields` as attributes."""
    return type("P", (), fields)()


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
    for bad in (True, ["a", "b", "c"], [0.1, 0.2, 0.3, 0.4], None):
        with pytest.raises(
            ValueError, match=r"^m: its image processor's image_mean .* is not one number or three"
        ):
            per_channel(_proc(image_mean=bad), "image_mean", "m")

"""Round 24 mutation kills: the encoder configs refuse what would fail late and accept what is valid for the tower
chosen (a ViT's pool width is its own width; only the ResNet's output stride is limited to 8, 16 or 32)."""

from __future__ import annotations

import pytest

from imgalign.pretrain import clip as clip_pt
from imgalign.pretrain import vlm as vlm_pt


def test_a_clip_vit_width_must_be_a_multiple_of_its_head_width() -> None:
    """The ResNet's attention pool is 32 x vision_width wide, a ViT's is vision_width: 48 over heads of 32 is no
    whole number of heads for the ViT (it would be for the ResNet's 1536)."""
    with pytest.raises(ValueError, match="vision pool width 48 over vision_head_width=32"):
        clip_pt.Config(vision_arch="vit", vision_width=48, vision_head_width=32).validate()
    clip_pt.Config(vision_arch="resnet", vision_width=48, vision_head_width=32).validate()
    clip_pt.Config(vision_arch="vit", vision_width=64, vision_head_width=32).validate()


def test_a_vlm_vit_takes_any_patch_size_that_divides_the_image() -> None:
    vlm_pt.Config(vision_arch="vit", patch_size=4).validate()
    with pytest.raises(ValueError, match="output stride: 8, 16 or 32"):
        vlm_pt.Config(vision_arch="resnet", patch_size=4).validate()


def test_a_vlm_checkpoint_interval_of_0_is_refused_by_name() -> None:
    """0 passed the check and stopped the run at its first step (``done % 0``) after the renders."""
    with pytest.raises(ValueError, match=r"checkpoint_every must be at least 1 \(got 0\)"):
        vlm_pt.Config(checkpoint_every=0).validate()

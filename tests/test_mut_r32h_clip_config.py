"""clip.Config.validate at its boundaries: a pool exactly one batch large is enough (each step samples the batch
without replacement from it), and the ResNet's attention pool is 32 x vision_width wide, not 16 x."""

from __future__ import annotations

import pytest

from imgalign.pretrain import clip as clip_pt


def test_a_pool_of_exactly_one_batch_is_accepted_and_one_smaller_refused() -> None:
    clip_pt.Config(pool_size=8, batch_size=8).validate()
    with pytest.raises(ValueError, match="pool_size must be at least batch_size"):
        clip_pt.Config(pool_size=7, batch_size=8).validate()


def test_a_resnet_pool_width_is_32_times_the_vision_width() -> None:
    clip_pt.Config(vision_arch="resnet", vision_width=2, vision_head_width=64).validate()  # 64 over 64
    with pytest.raises(ValueError, match=r"vision pool width 32 over vision_head_width=48"):
        clip_pt.Config(vision_arch="resnet", vision_width=1, vision_head_width=48).validate()

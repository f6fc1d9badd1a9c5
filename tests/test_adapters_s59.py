"""Stop 59: an image side beyond an SD3 transformer's positional-embedding grid is refused when the adapter is
built, naming the setting, not at the first forward pass in diffusers' words."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from imgalign.adapters import load_adapter

torch.set_num_threads(1)


def test_the_shapes_model_refuses_a_side_beyond_its_grid_and_takes_its_largest() -> None:
    """The shapes transformer's grid is 8 patches of 8 pixels: 64 (its default) is the largest side; 128 failed at
    the first velocity with "Height (16) cannot be greater than `pos_embed_max_size`: 8"."""
    a = load_adapter("shapes-t2i")
    assert a.max_resolution() == 64 and (a.height, a.width) == (64, 64)
    with pytest.raises(
        ValueError, match=r"height 128 is larger than this model can take: at most 64 .*8 patches of 8"
    ):
        load_adapter("shapes-t2i", height=128, width=64)
    with pytest.raises(ValueError, match=r"width 72 is larger than this model can take: at most 64"):
        load_adapter("shapes-t2i", height=64, width=72)
    small = load_adapter("shapes-t2i", height=32, width=64)  # below the grid: cropped, as diffusers does
    x = small.init_noise([torch.Generator().manual_seed(0)])
    assert small.velocity(x, torch.tensor([0.5]), small.encode(["a red circle"])).shape == x.shape


def test_a_grid_of_none_leaves_the_side_unbounded(sd3_dir: Path) -> None:
    """Without pos_embed_max_size diffusers computes the embedding for any size: no bound to refuse."""
    from imgalign.trainers.testing import tiny_sd3_transformer

    a = load_adapter(sd3_dir)
    assert a.max_resolution() == a.transformer.config.pos_embed_max_size * a.resolution_multiple()
    a.transformer = tiny_sd3_transformer(pos_embed_max_size=None)
    assert a.max_resolution() is None

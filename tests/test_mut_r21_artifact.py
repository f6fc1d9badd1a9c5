"""Mutation round 21: behaviour of the synthetic artifacts and the artifact reward (rewards/artifact.py) that no
test checked before."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from imgalign.rewards.artifact import add_artifact

torch.set_num_threads(1)


def test_a_smear_keeps_the_brightness_of_a_flat_image() -> None:
    """A motion blur averages neighbours: on a flat image it changes nothing (an unnormalised kernel brightened
    every smear to white)."""
    flat = torch.full((3, 32, 32), 0.4)
    for seed in range(3):
        torch.testing.assert_close(add_artifact(flat, "smear", random.Random(seed)), flat)


def test_broken_edges_reach_the_pixels_beside_an_edge() -> None:
    """The cut along an edge is widened to its neighbours (a 3x3 max pool): on a black | white step the white
    column next to the edge column is broken too, to the background (black)."""
    x = torch.zeros(3, 32, 32)
    x[:, :, 16:] = 1.0
    changed = torch.zeros(32, dtype=torch.bool)
    for seed in range(3):
        y = add_artifact(x, "broken_edges", random.Random(seed))
        changed |= (y[:, :, 17] != x[:, :, 17]).any(0)
        assert torch.equal(y[:, :, 18:], x[:, :, 18:])  # no further than one pixel
    assert changed.any()


def test_a_doubled_edge_adds_a_ghost_and_never_darkens() -> None:
    """The ghost copy is blended in by the maximum: pixels only get brighter, and some do."""
    x = torch.zeros(3, 32, 32)
    x[:, 10:20, 10:20] = 0.9
    for seed in range(4):
        y = add_artifact(x, "doubled_edges", random.Random(seed))
        assert bool((y >= x).all()) and bool((y > x).any())


def _centroid(weight: torch.Tensor) -> torch.Tensor:
    """The (row, column) centroid of a non-negative (H, W) weight."""
    h, w = weight.shape
    yy, xx = torch.meshgrid(torch.arange(h).float(), torch.arange(w).float(), indexing="ij")
    return torch.stack([(weight * yy).sum(), (weight * xx).sum()]) / weight.sum()


def test_colour_bleed_shifts_the_colour_away_from_its_shape() -> None:
    """The chroma is blurred and moved by 2 or 3 pixels in both directions: the colour of a red square on grey ends
    up off the square's centre, while the brightness stays where it was."""
    x = torch.full((3, 40, 40), 0.5)
    x[:, 16:24, 16:24] = torch.tensor([0.8, 0.3, 0.3]).view(3, 1, 1)
    centre = torch.tensor([19.5, 19.5])
    for seed in range(3):
        y = add_artifact(x, "colour_bleed", random.Random(seed))
        chroma = (y - y.mean(0, keepdim=True)).abs().sum(0)
        shift = (_centroid(chroma) - centre).abs()
        assert bool((shift > 1.5).all()), shift


def test_oversaturation_pushes_colours_away_from_grey() -> None:
    """Each channel's distance from the pixel's grey (mean) grows: a muted colour gets more saturated."""
    x = torch.tensor([0.45, 0.35, 0.3]).view(3, 1, 1).expand(3, 8, 8).clone()
    for seed in range(3):
        y = add_artifact(x, "oversaturate", random.Random(seed))
        spread_in = (x - x.mean(0)).abs().sum(0)
        spread_out = (y - y.mean(0)).abs().sum(0)
        assert bool((spread_out > 1.5 * spread_in).all())


def _folder(path: Path, images: torch.Tensor) -> Path:
    """`images` (N, 3, H, W) saved as PNGs in a new folder `path`."""
    from imgalign.rewards.base import to_pil

    path.mkdir()
    for i, im in enumerate(to_pil(images)):
        im.save(path / f"{i}.png")
    return path


@pytest.mark.parametrize("short", ["clean", "artifact"])
def test_a_folder_of_one_image_is_named_by_its_own_flag(tmp_path: Path, short: str) -> None:
    """fit_artifact on folders: the folder with too few images is named with the flag that gave it."""
    from imgalign.rewards.artifact import fit_artifact

    x = torch.rand(3, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    folders = {k: _folder(tmp_path / k, x[:1] if k == short else x) for k in ("clean", "artifact")}
    with pytest.raises(ValueError, match=rf"^--{short} '{folders[short]}' holds 1 image\(s\)"):
        fit_artifact(folders["clean"], folders["artifact"], "stats", tmp_path / "h.safetensors", epochs=1)


def test_imgalign_score_scores_images_without_prompts_with_the_artifact_reward(tmp_path: Path) -> None:
    """The artifact reward reads no prompt: `imgalign score` scores a folder of images that have none (a reward
    said to read one is refused there, as no prompt is given), each row with its score."""
    import json

    from imgalign.cli import main

    d = _folder(tmp_path / "ims", torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(1)))
    out = tmp_path / "r.jsonl"
    assert main(["score", str(d), "--reward", "artifact", "--out", str(out), "--no-progress"]) == 0
    rows = [json.loads(r) for r in out.read_text().splitlines()]
    assert len(rows) == 2 and all(r["error"] is None and r["prompt"] is None for r in rows), rows
    assert all(r["scores"]["artifact"] <= 0 for r in rows)  # log p(clean)

"""rewards/fid.py: behaviour mutation round 21 (second pass) found unchecked."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from imgalign.rewards.fid import STATS_KIND, folder_features, load_stats


@pytest.mark.parametrize(
    ("mu", "shape"),
    [(torch.zeros(3, 3), r"\(3, 3\)"), (torch.tensor(0.0), r"\(\)")],
    ids=["matrix", "scalar"],
)
def test_stats_whose_mean_is_not_a_vector_are_refused(tmp_path: Path, mu: torch.Tensor, shape: str) -> None:
    """A hand-edited stats file whose mu is a (3, 3) matrix (next to a (3, 3) sigma) or a scalar is refused as
    not FID statistics, naming the shapes it wants (a (d, d) mu was read as d = 3 and taken)."""
    path = tmp_path / "s.safetensors"
    meta = {"n": "4", "features": "stats", "kind": STATS_KIND}
    save_file({"mu": mu.double(), "sigma": torch.eye(3, dtype=torch.float64)}, str(path), metadata=meta)
    with pytest.raises(ValueError, match=rf"not an imgalign FID stats file .*: mu {shape}, .*want mu \(d,\)"):
        load_stats(path)


def test_a_folder_of_one_image_is_refused_for_statistics(tmp_path: Path) -> None:
    """One readable image gives no covariance: folder_features refuses it naming the folder and the count."""
    Image.new("RGB", (8, 8), (200, 10, 10)).save(tmp_path / "a.png")
    with pytest.raises(ValueError, match=r"holds 1 readable image.*FID statistics need at least 2"):
        folder_features(tmp_path, lambda x: x.flatten(1)[:, :4])
    Image.new("RGB", (8, 8), (10, 200, 10)).save(tmp_path / "b.png")
    assert folder_features(tmp_path, lambda x: x.flatten(1)[:, :4]).shape == (2, 4)


def test_features_of_another_size_than_the_stats_are_refused_when_pushed(tmp_path: Path) -> None:
    """An encoder whose features do not have the reference statistics' size (one that gives other features than
    its declared size) is refused naming both sizes and the fid-stats command (not a torch shape error)."""
    from imgalign.rewards.features import build_features
    from imgalign.rewards.fid import FIDReward, save_stats

    d = build_features("stats", "cpu", torch.float32).dim
    path = tmp_path / "s.safetensors"
    save_stats(path, torch.zeros(d), torch.eye(d), 4, "stats")
    r = FIDReward(features="stats", ref=str(path), set_size=4)
    r.encoder = lambda images: torch.zeros(images.shape[0], d + 1)
    with pytest.raises(ValueError, match=rf"statistics are {d}-d but the 'stats' features .* are {d + 1}-d"):
        r.update(torch.rand(2, 3, 16, 16))

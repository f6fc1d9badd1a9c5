"""Bad-input round 31 (T25): the fid reward in `stats` features, whose values depend on the image size, with
reference, init= and scored images of different sizes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from imgalign.rewards.fid import FIDReward

SAID = "depend on the image size"


def _folders(tmp_path: Path) -> tuple[Path, Path, Path]:
    """12 noise images at 16x16 (`small`), the same at 32x32 (`large`), and 12 others at 16x16 (`other`)."""
    small, large, other = (tmp_path / n for n in ("small", "large", "other"))
    for d in (small, large, other):
        d.mkdir()
    rng = np.random.default_rng(0)
    for i in range(12):
        im = Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8))
        im.save(large / f"{i}.png")
        im.resize((16, 16), Image.Resampling.BICUBIC).save(small / f"{i}.png")
        im = Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8))
        im.resize((16, 16), Image.Resampling.BICUBIC).save(other / f"{i}.png")
    return small, large, other


def _tensor(folder: Path) -> torch.Tensor:
    arrs = [
        np.asarray(Image.open(f).convert("RGB"), dtype=np.float32) / 255 for f in sorted(folder.glob("*.png"))
    ]
    return torch.from_numpy(np.stack(arrs)).permute(0, 3, 1, 2).contiguous()


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if SAID in r.getMessage()]


def test_init_and_scored_images_are_read_at_the_reference_folders_size(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The same images at 32x32 as the 16x16 reference were far from it (FD and reward), further than another set
    at 16x16, without a word: init= and the scored images are resized to the reference's size, with one warning."""
    small, large, other = _folders(tmp_path)
    opts = {"features": "stats", "ref": str(small), "set_size": 12, "mode": "group"}
    with caplog.at_level("WARNING"):  # one size: nothing said
        apart = FIDReward(init=str(other), **opts).current_fd()
        # the scored images: the set at the reference's size, the same images scored at 32x32
        scored = FIDReward(init=str(small), **opts).score(_tensor(large), [""] * 12, None)
    assert _said(caplog) == [
        "fid reward: the images scored or added to the set are 32x32 and the reference images 16x16: stats "
        "features depend on the image size, so they are resized to 16x16 (bicubic) to compare the images, not "
        "their sizes"
    ]
    assert scored.details[0]["fd_before"] < 1e-6 and scored.details[0]["fd_after"] < 0.01 * apart  # was 20x
    caplog.clear()
    with caplog.at_level("WARNING"):
        r = FIDReward(init=str(large), **opts)
        same = r.current_fd()
        out = r.score(_tensor(large), [""] * 12, None)
        r.update(_tensor(large))
    assert same < 0.01 * apart  # was 20 times `apart`
    assert (
        abs(out.details[0]["fd_after"] - same) < 0.01 * apart
    )  # the same images scored: the FD hardly moves
    assert abs(float(out.scores[0])) < 0.01 * apart
    assert _said(caplog) == [
        f"fid reward: the images of init={str(large)!r} are 32x32 and the reference images 16x16: stats features "
        "depend on the image size, so they are resized to 16x16 (bicubic) to compare the images, not their sizes"
    ]  # once per reward, not again for the scored and added images of that size


def test_scored_images_are_resized_to_the_renders_size(caplog: pytest.LogCaptureFixture) -> None:
    """ref=shapes: images of another size than the renders' 64x64 are resized to it, and the warning names both;
    images of 64x64 are encoded as they are (no warning, the values unchanged)."""
    from imgalign.rewards.features import build_features, resize
    from imgalign.rewards.fid import shapes_reference_images

    r = FIDReward(features="stats", ref="shapes", ref_size=8, set_size=4, mode="group")
    renders = shapes_reference_images(8, seed=3)
    with caplog.at_level("WARNING"):
        r.update(renders[:4])
    assert not _said(caplog)
    enc = build_features("stats")
    assert torch.allclose(r.buffer, enc(renders[:4]).double())
    small = resize(renders[4:], (32, 32))
    with caplog.at_level("WARNING"):
        out = r.score(small, [""] * 4, None)
        r.score(small, [""] * 4, None)
    assert _said(caplog) == [
        "fid reward: the images scored or added to the set are 32x32 and the reference images 64x64: stats "
        "features depend on the image size, so they are resized to 64x64 (bicubic) to compare the images, not "
        "their sizes"
    ]
    expected = r.score(resize(small, (64, 64)).clamp(0, 1), [""] * 4, None)
    assert torch.allclose(out.scores, expected.scores)


def _fid_stats(out: Path, *args: str) -> Path:
    from imgalign.cli import main

    assert main(["rewards", "fid-stats", *args, "--features", "stats", "--out", str(out)]) == 0
    return out


def test_a_stats_file_records_its_image_size_and_is_read_like_a_folder_of_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`rewards fid-stats` records the images' size (a folder's, the renders' 64x64); a ref= stats file with one
    is treated as a folder of that size (init= and scored images resized to it); a file without one (written
    before) loads and resizes nothing."""
    from safetensors import safe_open

    from imgalign.rewards.fid import load_stats, save_stats, stats_image_size

    small, large, other = _folders(tmp_path)
    ref = _fid_stats(tmp_path / "small.safetensors", "--images", str(small))
    shapes = _fid_stats(tmp_path / "shapes.safetensors", "--images", "shapes", "--n", "4")
    with safe_open(str(ref), framework="pt") as fh:
        assert fh.metadata()["image_size"] == "16x16"
    assert stats_image_size(shapes) == (64, 64)
    opts = {"features": "stats", "set_size": 12, "mode": "group"}
    apart = FIDReward(ref=str(ref), init=str(other), **opts).current_fd()
    with caplog.at_level("WARNING"):
        r = FIDReward(ref=str(ref), init=str(large), **opts)
        out = r.score(_tensor(large), [""] * 12, None)
    assert r.current_fd() < 0.01 * apart and out.details[0]["fd_after"] < 0.01 * apart  # was 20x
    assert _said(caplog) == [
        f"fid reward: the images of init={str(large)!r} are 32x32 and the reference images 16x16: stats features "
        "depend on the image size, so they are resized to 16x16 (bicubic) to compare the images, not their sizes"
    ]
    # an older file, without a size: loads, and nothing is resized (as before)
    mu, sigma, n, feats = load_stats(ref)
    old = tmp_path / "old.safetensors"
    save_stats(old, mu, sigma, n, feats)
    assert stats_image_size(old) is None
    caplog.clear()
    with caplog.at_level("WARNING"):
        r = FIDReward(ref=str(old), init=str(large), **opts)
    assert not _said(caplog) and r.current_fd() > apart


def test_a_stats_files_damaged_image_size_is_named(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    from imgalign.rewards.fid import STATS_KIND

    small, _large, _other = _folders(tmp_path)
    ref = _fid_stats(tmp_path / "small.safetensors", "--images", str(small))
    bad = tmp_path / "bad.safetensors"
    meta = {"n": "12", "features": "stats", "kind": STATS_KIND, "image_size": "16"}
    save_file(load_file(str(ref)), str(bad), metadata=meta)
    with pytest.raises(
        ValueError, match=r"bad.safetensors: its image_size metadata '16' is not WIDTHxHEIGHT"
    ):
        FIDReward(features="stats", ref=str(bad))

"""Round 25 mutation tests for ``imgalign.rewards.fid``: a stats file whose covariance is not square is refused
by name, and an empty ``mode=`` is refused before the encoder loads."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from imgalign.rewards.fid import STATS_KIND, FIDReward, load_stats


def test_a_stats_file_whose_sigma_is_not_square_is_refused_as_damaged(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    path = tmp_path / "wide.safetensors"
    mu, sigma = torch.zeros(3, dtype=torch.float64), torch.zeros(3, 4, dtype=torch.float64)
    save_file(
        {"mu": mu, "sigma": sigma}, str(path), metadata={"n": "5", "features": "stats", "kind": STATS_KIND}
    )
    with pytest.raises(ValueError, match=r"not an imgalign FID stats file .*: mu \(3,\), sigma \(3, 4\)"):
        load_stats(path)


@pytest.mark.parametrize("mode", ["", "Sample", "groups"])
def test_a_mode_other_than_sample_or_group_is_refused_before_the_encoder_loads(mode: str) -> None:
    with pytest.raises(ValueError, match=r"fid reward: mode must be 'sample' or 'group', got"):
        FIDReward(features="no-such-encoder", mode=mode)


def test_a_feature_row_that_is_not_finite_keeps_its_details_row_in_place() -> None:
    """A finite image whose features are not finite (an encoder overflow) gets NaN, and the details stay one row per
    image, in order (the reward contract refuses a details list of another length)."""
    reward = FIDReward(features="stats", ref_size=8, set_size=6)
    images = torch.rand(6, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    reward.update(images)
    encoder = reward.encoder

    def overflowing(x: torch.Tensor) -> torch.Tensor:
        f = encoder(x)
        f[1] = float("inf")
        return f

    reward.encoder = overflowing  # type: ignore[assignment]
    out = reward.score(images[:3], ["", "", ""], None)
    assert out.details is not None and len(out.details) == 3
    assert torch.isnan(out.scores[1]) and torch.isfinite(out.scores[[0, 2]]).all()
    assert [d["fd_after"] != d["fd_after"] for d in out.details] == [False, True, False]

"""Feature encoders are cached per process by name; one whose local folder was written again since (exported anew
between two calls in one notebook) served the old weights from the cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from test_rewards_tiny import make_tiny_dinov2

from imgalign.rewards.features import build_features

torch.set_num_threads(1)


def test_an_encoder_folder_written_again_is_built_anew_and_an_unchanged_one_is_served_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("imgalign.rewards.features._CACHE", {})
    folder = make_tiny_dinov2(tmp_path / "dino", seed=0)
    x = torch.rand(2, 3, 32, 32)
    first = build_features(f"dinov2:{folder}")
    assert build_features(f"dinov2:{folder}") is first
    old = first(x)
    make_tiny_dinov2(folder, seed=1)
    # the same size and, on a coarse clock, the same time: the stamp still differs by the time set here
    for f in folder.iterdir():
        os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 1_000_000_000))
    second = build_features(f"dinov2:{folder}")
    assert second is not first
    assert not torch.allclose(second(x), old)
    assert build_features(f"dinov2:{folder}") is second


def test_the_stamp_of_names_without_a_local_path_is_empty(tmp_path: Path) -> None:
    from imgalign.rewards.features import files_stamp

    assert files_stamp("stats") == ()
    assert files_stamp("shapes-clip") == ()
    assert files_stamp("dinov2:facebook/dinov2-small") == ()
    assert files_stamp(f"dinov2:{tmp_path / 'gone'}") == ()
    (tmp_path / "m.pt").write_bytes(b"123")
    assert [(n, size) for n, size, _ in files_stamp(f"open_clip:ViT-B-32@{tmp_path / 'm.pt'}")] == [
        ("m.pt", 3)
    ]

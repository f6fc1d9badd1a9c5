"""Bad-input round 29: `imgalign train` under odd launch settings (the launcher's RANK and WORLD_SIZE)."""

from __future__ import annotations

import logging

import pytest

from imgalign.cli import main
from imgalign.launch import _warn_rank_without_launch


@pytest.mark.parametrize("world_size", [None, "1"])
def test_a_rank_without_a_launch_is_warned_of(
    world_size: str | None, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RANK=1 left in the shell without WORLD_SIZE: `imgalign train --print-config` printed nothing and returned 0
    (a run trained, alone, and printed no summary), without a word why. A warning names RANK and what to do."""
    _warn_rank_without_launch.cache_clear()
    monkeypatch.setenv("RANK", "1")
    if world_size is None:
        monkeypatch.delenv("WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("WORLD_SIZE", world_size)
    with caplog.at_level(logging.WARNING, logger="imgalign"):
        assert main(["train", "--print-config"]) == 0
        assert main(["train", "--print-config"]) == 0
    warned = [r.getMessage() for r in caplog.records if r.getMessage().startswith("RANK=1 is set")]
    assert warned == [
        "RANK=1 is set, but WORLD_SIZE is not (or is 1): imgalign takes this process for process 1 of a launch "
        "and prints no config or run summary, though it runs alone; unset RANK (left from another launch?) or "
        "start the processes with accelerate launch or torchrun"
    ]


@pytest.mark.parametrize("rank, world_size", [("1", "2"), ("0", None), ("0", "2")])
def test_a_launch_s_own_rank_is_not_warned_of(
    rank: str, world_size: str | None, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a launch of several processes (or on rank 0) RANK is what the launcher set: no warning."""
    _warn_rank_without_launch.cache_clear()
    monkeypatch.setenv("RANK", rank)
    if world_size is None:
        monkeypatch.delenv("WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("WORLD_SIZE", world_size)
    with caplog.at_level(logging.WARNING, logger="imgalign"):
        assert main(["train", "--print-config"]) == 0
    assert not [r for r in caplog.records if "RANK=" in r.getMessage()]

"""Bad-input round 29: `imgalign train` under odd launch settings (the launcher's RANK and WORLD_SIZE)."""

from __future__ import annotations

import pytest

from imgalign.cli import main
from imgalign.launch import launched_rank


@pytest.mark.parametrize("world_size", [None, "1"])
def test_a_rank_without_a_launch_is_the_main_process(
    world_size: str | None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """RANK=1 left in the shell without WORLD_SIZE: `imgalign train --print-config` printed nothing and returned 0
    (a run trained, alone, as accelerate's main process, and printed no summary), without a word why. The process
    is rank 0, as accelerate has it, and prints."""
    monkeypatch.setenv("RANK", "1")
    if world_size is None:
        monkeypatch.delenv("WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("WORLD_SIZE", world_size)
    assert launched_rank() == 0
    assert main(["train", "--print-config"]) == 0
    assert "model:" in capsys.readouterr().out


@pytest.mark.parametrize(
    "rank, world_size, printed", [("1", "2", False), ("0", None, True), ("0", "2", True)]
)
def test_a_launch_s_own_rank_decides_who_prints(
    rank: str,
    world_size: str | None,
    printed: bool,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under a launch of several processes RANK is what the launcher set: only rank 0 prints the config."""
    monkeypatch.setenv("RANK", rank)
    if world_size is None:
        monkeypatch.delenv("WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("WORLD_SIZE", world_size)
    assert main(["train", "--print-config"]) == 0
    assert ("model:" in capsys.readouterr().out) is printed

"""Mutation round 28 (helper i): ``imgalign.cli.argv_words`` (no argv, floats, bools) and ``rngs_kept``'s CUDA
side (restored when CUDA is in use; not started by it when it is not)."""

from __future__ import annotations

import sys

import pytest
import torch

from imgalign import cli


def test_no_argv_stays_none_so_argparse_reads_the_command_line(monkeypatch, capsys) -> None:
    assert cli.argv_words(None) is None
    monkeypatch.setattr(sys, "argv", ["imgalign", "--version"])
    with pytest.raises(SystemExit) as e:  # main() reads sys.argv, not an empty command
        cli.main()
    assert e.value.code == 0
    assert capsys.readouterr().out.strip()


def test_a_float_word_is_its_text_and_a_bool_is_refused() -> None:
    assert cli.argv_words(["x", 0.5, 3]) == ["x", "0.5", "3"]
    with pytest.raises(TypeError, match=r"^main\(\): item 1 of the command is True \(bool\); give each word"):
        cli.argv_words(["--flag", True])


class _FakeCuda:
    def __init__(self, initialized: bool) -> None:
        self.initialized = initialized
        self.state = ["cuda-state-0"]
        self.calls: list[str] = []

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return self.initialized

    def get_rng_state_all(self) -> list[str]:
        self.calls.append("get")
        return list(self.state)

    def set_rng_state_all(self, state: list[str]) -> None:
        self.calls.append("set")
        self.state = list(state)


def test_cuda_random_state_is_restored_when_cuda_is_in_use(monkeypatch) -> None:
    fake = _FakeCuda(initialized=True)
    monkeypatch.setattr(torch, "cuda", fake)
    with cli.rngs_kept():
        fake.state = ["drawn-by-the-command"]
    assert fake.state == ["cuda-state-0"]
    assert fake.calls == ["get", "set"]


def test_cuda_is_not_touched_when_not_yet_initialized(monkeypatch) -> None:
    """Reading CUDA's state would start CUDA in a caller that never used it."""
    fake = _FakeCuda(initialized=False)
    monkeypatch.setattr(torch, "cuda", fake)
    with cli.rngs_kept():
        pass
    assert fake.calls == []

"""Round 32 (helper g): an in-process ``imgalign.cli.main`` call leaves the caller's torch random state as it was,
whether the command seeded torch's global generator (``train`` does, in its setup) and whether it ended or raised."""

from __future__ import annotations

import argparse

import pytest
import torch

from imgalign import cli


@pytest.mark.parametrize("fail", [False, True])
def test_the_callers_torch_random_state_is_back_after_a_command(monkeypatch, fail) -> None:
    """A notebook's torch.manual_seed(0), then `main(["train", ...])`: its next draws were the trainer's seed's."""

    def seeding_command(args: argparse.Namespace) -> int:
        torch.manual_seed(1234)  # as the trainer's setup does
        torch.rand(3)
        if fail:
            raise RuntimeError("a plug-in crashed")
        return 0

    monkeypatch.setattr(cli, "_run", seeding_command)
    before = torch.random.get_rng_state()
    try:
        torch.manual_seed(0)
        expected = torch.rand(4)
        torch.manual_seed(0)
        if fail:
            with pytest.raises(RuntimeError, match="a plug-in crashed"):
                cli.main(["report", "RUN"])
        else:
            assert cli.main(["report", "RUN"]) == 0
        got = torch.rand(4)
    finally:
        torch.random.set_rng_state(before)
    assert torch.equal(got, expected)

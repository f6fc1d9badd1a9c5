"""Mutation round 19: `imgalign rewards` (imgalign/commands/rewards_cmd.py)."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from imgalign.cli import main
from imgalign.rewards.sanity import PairResult


@pytest.mark.parametrize("blank", ["", " ", "\t"])
def test_an_fd_argument_of_blanks_is_named_as_empty(blank: str, capsys: pytest.CaptureFixture) -> None:
    """An fd argument of blanks is named as empty, as "" is (an unset shell variable?), before any encoder loads,
    not as a folder that does not exist."""
    assert main(["rewards", "fd", blank, "shapes", "--features", "stats"]) == 2
    assert "an fd argument is empty" in capsys.readouterr().err


def test_check_kinds_may_have_blanks_after_the_commas(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--kinds "shape, colour"` (a blank after the comma) names the kinds shape and colour;
    it is not refused as the unknown kind ' colour'."""
    calls: list[tuple[str, ...]] = []

    def fake_check(reward, n, seed, kinds):
        calls.append(kinds)
        return PairResult(accuracy=1.0, n=n, per_task={}, per_kind={}, mean_true=1.0, mean_corrupted=0.0)

    monkeypatch.setattr("imgalign.rewards.sanity.true_vs_corrupted", fake_check)
    mod = types.ModuleType("my_lab.r19_kinds")
    mod.f = lambda images, prompts, metadata=None: torch.zeros(len(prompts))
    monkeypatch.setitem(sys.modules, "my_lab.r19_kinds", mod)
    argv = ["rewards", "check", "--reward", "my_lab.r19_kinds:f", "--n", "2", "--kinds", " shape,  colour "]
    assert main(argv) == 0, capsys.readouterr().err
    assert calls == [("shape", "colour")]


def test_fid_stats_records_the_features_it_was_given(
    tmp_path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stats file names the --features given (the fid reward and fd check it against theirs), whatever they
    are: the other tests wrote 'stats' only. The encoder is stood in for by 'stats' (no model loads)."""
    import imgalign.rewards.features as F
    from imgalign.rewards.fid import load_stats

    real = F.build_features
    monkeypatch.setattr(F, "build_features", lambda name, device="cpu": real("stats", device))
    out = tmp_path / "s.safetensors"
    argv = ["rewards", "fid-stats", "--images", "shapes", "--n", "3", "--features", "shapes-clip"]
    assert main([*argv, "--out", str(out)]) == 0
    assert load_stats(out)[3] == "shapes-clip"
    assert "shapes-clip features" in capsys.readouterr().out

"""Mutation round 16: `imgalign rewards ...` (imgalign/commands/rewards_cmd.py) behaviour the other tests left
unchecked: the documented defaults, the advice printed after a fit, the refusals a user relies on."""

from __future__ import annotations

import inspect
import re
import sys
import types
from pathlib import Path

import pytest
import torch
from test_rewards_cmd import recording_fitters
from test_rewards_heads import write_folder

from imgalign.cli import main
from imgalign.rewards.fid import save_stats, shapes_reference_images
from imgalign.rewards.sanity import KINDS, PairResult

torch.set_num_threads(1)


def test_rewards_without_an_action_is_a_usage_error(capsys: pytest.CaptureFixture) -> None:
    """`imgalign rewards` alone names the missing ACTION (exit status 2), not an AttributeError traceback."""
    with pytest.raises(SystemExit) as e:
        main(["rewards"])
    assert e.value.code == 2
    assert "required: ACTION" in capsys.readouterr().err


def test_fit_commands_default_options(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The documented defaults reach the fitters: fit-discriminator on shapes-clip features, 256 hidden units, 300
    epochs at lr 1e-3; fit-artifact on stats features, 32 hidden units, 500 epochs; both hold out 20% per class."""
    seen = recording_fitters(monkeypatch)
    real = write_folder(tmp_path / "real", shapes_reference_images(2, seed=1))
    fake = write_folder(tmp_path / "fake", shapes_reference_images(2, seed=2))
    out = str(tmp_path / "h.safetensors")
    assert main(["rewards", "fit-discriminator", "--real", str(real), "--fake", str(fake), "--out", out]) == 0
    a, k = seen["disc"]
    assert a[2] == "shapes-clip"
    assert k == {"hidden": 256, "epochs": 300, "lr": 1e-3, "val_frac": 0.2, "device": "cpu"}
    assert main(["rewards", "fit-artifact", "--clean", str(real), "--artifact", str(fake), "--out", out]) == 0
    a, k = seen["art"]
    assert a[2] == "stats"
    assert (k["hidden"], k["epochs"], k["val_frac"]) == (32, 500, 0.2)


def test_fit_commands_advise_a_reward_spec_that_loads_the_result(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last line after a fit names the reward and the option that loads the written file; that option is one
    the reward takes (discriminator: head=, artifact: model=)."""
    from imgalign.rewards.base import reward_target

    recording_fitters(monkeypatch)
    real = write_folder(tmp_path / "real", shapes_reference_images(2, seed=1))
    fake = write_folder(tmp_path / "fake", shapes_reference_images(2, seed=2))
    out = str(tmp_path / "h.safetensors")
    for argv in (
        ["fit-discriminator", "--real", str(real), "--fake", str(fake)],
        ["fit-artifact", "--clean", str(real), "--artifact", str(fake), "--features", "stats"],
    ):
        assert main(["rewards", *argv, "--out", out]) == 0
        last = capsys.readouterr().out.splitlines()[-1]
        m = re.fullmatch(rf"wrote {re.escape(out)}; use it with --reward (\w+):(\w+)=(.+)", last)
        assert m and m.group(3) == out, last
        assert m.group(2) in inspect.signature(reward_target(m.group(1))).parameters, last


def test_a_zero_val_frac_is_allowed_and_an_upper_case_image_out_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--val-frac 0 (fit on every image, no held-out share) is in [0, 1) and reaches the fitter; --out X.PNG is an
    image name as X.png is (image suffixes are matched without case)."""
    seen = recording_fitters(monkeypatch)
    real = write_folder(tmp_path / "real", shapes_reference_images(2, seed=1))
    fake = write_folder(tmp_path / "fake", shapes_reference_images(2, seed=2))
    argv = ["rewards", "fit-discriminator", "--real", str(real), "--fake", str(fake), "--features", "stats"]
    assert main([*argv, "--out", str(tmp_path / "h.safetensors"), "--val-frac", "0"]) == 0
    assert seen["disc"][1]["val_frac"] == 0.0
    shout = real / "0000.PNG"
    assert main([*argv, "--out", str(shout)]) == 2
    assert "is an image name, but the head is written as a safetensors file" in capsys.readouterr().err
    assert not shout.exists()


def test_build_shapes_artifact_says_where_it_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("imgalign.rewards.artifact.build_shapes_artifact", lambda out, **k: {"val_acc": 1.0})
    assert main(["rewards", "build-shapes-artifact", "--out", str(tmp_path / "m"), "--n", "4"]) == 0
    assert capsys.readouterr().out.endswith(f"wrote {tmp_path / 'm'}\n")


def test_fd_and_fid_stats_render_2000_shapes_by_default(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """'shapes' means --n 2000 renders unless told otherwise (in fd and in fid-stats)."""
    asked: list[int] = []

    def renders(n: int, seed: int = 0) -> torch.Tensor:
        asked.append(n)
        return shapes_reference_images(4, seed=seed)

    monkeypatch.setattr("imgalign.rewards.fid.shapes_reference_images", renders)
    assert main(["rewards", "fd", "shapes", "shapes", "--features", "stats"]) == 0
    out = tmp_path / "s.safetensors"
    assert main(["rewards", "fid-stats", "--images", "shapes", "--features", "stats", "--out", str(out)]) == 0
    assert asked == [2000, 2000, 2000]


def test_fd_prints_six_significant_digits(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Two stats files whose means differ by 0.01 in one dimension (same covariance): FD = 1e-4, printed as such
    (a fixed number of decimals printed a small FD as 0.000)."""
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    save_stats(a, torch.zeros(2), torch.eye(2), 10, "stats")
    save_stats(b, torch.tensor([0.01, 0.0]), torch.eye(2), 10, "stats")
    assert main(["rewards", "fd", str(a), str(b), "--features", "stats"]) == 0
    printed = float(re.search(r"features: (\S+)", capsys.readouterr().out).group(1))
    assert printed == pytest.approx(1e-4, rel=1e-5)


def _pair_result(n: int) -> PairResult:
    return PairResult(accuracy=1.0, n=n, per_task={}, per_kind={}, mean_true=1.0, mean_corrupted=0.0)


def test_check_defaults_and_every_reward_given(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rewards check` draws 240 pairs from seed 0 with every corruption kind by default, and reports each --reward
    given, in order."""
    calls: list[dict] = []

    def fake_check(reward, n, seed, kinds):
        calls.append({"n": n, "seed": seed, "kinds": kinds})
        return _pair_result(n=n)

    monkeypatch.setattr("imgalign.rewards.sanity.true_vs_corrupted", fake_check)
    mod = types.ModuleType("my_lab.r16_check")
    mod.a = lambda images, prompts, metadata=None: torch.zeros(len(prompts))
    mod.b = lambda images, prompts, metadata=None: torch.zeros(len(prompts))
    monkeypatch.setitem(sys.modules, "my_lab.r16_check", mod)
    assert main(["rewards", "check", "--reward", "my_lab.r16_check:a", "--reward", "my_lab.r16_check:b"]) == 0
    assert calls == [{"n": 240, "seed": 0, "kinds": KINDS}] * 2
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split(":", 2)[1] for ln in lines] == ["a", "b"]


def test_check_refuses_a_prompt_free_reward_also_with_options_and_as_a_function(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reward that does not read the prompt is refused: a registered one given with options (known from its
    class, before its model loads) and a function that declares ``needs_prompt = False`` (known once built)."""
    import imgalign.rewards.base as base

    with monkeypatch.context() as m:
        m.setattr(base, "build_reward", lambda *a, **k: pytest.fail("the reward's model loaded"))
        assert main(["rewards", "check", "--reward", "artifact:features=stats", "--n", "4"]) == 2
    assert "artifact:features=stats does not read the prompt" in capsys.readouterr().err

    def blind(images, prompts, metadata=None):
        return torch.zeros(len(prompts))

    blind.needs_prompt = False
    mod = types.ModuleType("my_lab.r16_blind")
    mod.blind = blind
    monkeypatch.setitem(sys.modules, "my_lab.r16_blind", mod)
    monkeypatch.setattr(
        "imgalign.rewards.sanity.true_vs_corrupted", lambda *a, **k: pytest.fail("the check ran")
    )
    assert main(["rewards", "check", "--reward", "my_lab.r16_blind:blind", "--n", "4"]) == 2
    assert "my_lab.r16_blind:blind does not read the prompt" in capsys.readouterr().err

"""Every bench script runs to its last line at the smallest sizes (a tiny random SD3 pipeline for the ones that
train), so a change to the code they drive cannot leave them broken unnoticed. Nothing here is timed: the benches
print ratios measured side by side, which only a run at full size means anything for."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest
import torch

from imgalign.trainers.testing import one_step_config, write_config

REPO = Path(__file__).resolve().parents[1]


def constant_reward(images: torch.Tensor, prompts: list[str], metadata: object = None) -> torch.Tensor:
    return torch.zeros(len(prompts))


@pytest.fixture()
def tiny_config(sd3_dir: Path, tmp_path: Path) -> Path:
    cfg = one_step_config(sd3_dir, tmp_path / "run")
    return write_config(cfg, tmp_path / "tiny.yaml")


def run_bench(script: str, args: list[str], monkeypatch: pytest.MonkeyPatch, capsys) -> str:
    """Run ``bench/SCRIPT`` as ``python bench/SCRIPT ARGS`` does, in this process; returns what it printed."""
    threads = torch.get_num_threads()
    monkeypatch.setattr(sys, "argv", [script, *args])
    try:
        runpy.run_path(str(REPO / "bench" / script), run_name="__main__")
    except SystemExit as e:  # a main() returning 0 through sys.exit
        assert not e.code, capsys.readouterr().err[-2000:]
    finally:
        torch.set_num_threads(threads)
    return capsys.readouterr().out


@pytest.mark.parametrize(
    "script, args, last",
    [
        (
            "bench_fid.py",
            ["--d", "8", "--batch", "2", "--set-size", "12", "--exact-samples", "2"],
            "speed ratio",
        ),
        (
            "bench_folder_features.py",
            ["--images", "4", "--side", "16", "--batch", "2"],
            "whole / batched: peak memory",
        ),
        (
            "bench_tree.py",
            ["--prompts", "1", "--leaves", "2", "--steps", "2", "--size", "8", "--repeats", "1"],
            "flat/tree per leaf image",
        ),
    ],
)
def test_the_benches_without_a_model_run_to_their_ratios(script, args, last, monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert last in run_bench(script, args, monkeypatch, capsys)


@pytest.mark.parametrize(
    "script, args, last",
    [
        ("bench_train.py", ["--steps", "1"], "total wall:"),
        ("grad_by_step.py", ["--batches", "1"], "score scale"),
        ("grad_snr.py", ["--batches", "2"], "reward zero-std"),
        # every group's rewards equal: no gradient at all (it raised ZeroDivisionError)
        (
            "grad_by_step.py",
            ["--batches", "1", "--set", "rewards.names=[test_bench_smoke:constant_reward]"],
            "every gradient was zero",
        ),
        (
            "bench_marble.py",
            ["--samples", "4", "--rewards", "2", "--reps", "1", "--variants", "single,marble"],
            "x",
        ),
    ],
)
def test_the_training_benches_run_on_a_tiny_pipeline(
    script, args, last, tiny_config: Path, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    config = [str(tiny_config)] if script == "bench_train.py" else ["--config", str(tiny_config)]
    assert last in run_bench(script, config + args, monkeypatch, capsys)


def test_the_sampling_benches_run_on_a_tiny_pipeline(sd3_dir: Path, tmp_path, monkeypatch, capsys):
    """bench_sampling on the tiny pipeline; of bench_threads, whose every measurement is a fresh process (four at
    the smallest size, minutes on a busy machine), the timed sampling a child process runs."""
    monkeypatch.chdir(tmp_path)
    out = run_bench(
        "bench_sampling.py",
        ["--model", str(sd3_dir), "--n", "1", "--batch", "1", "--steps", "1"],
        monkeypatch,
        capsys,
    )
    assert '"ratio_batched_over_one_at_a_time"' in out
    seconds, threads = run_bench(
        "bench_threads.py", ["--child", "--images", "1", "--steps", "1"], monkeypatch, capsys
    ).split()
    assert float(seconds) > 0 and int(threads) >= 1

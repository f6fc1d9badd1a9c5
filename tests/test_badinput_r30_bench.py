"""Bad-input round 30: the bench scripts given a size or thread count of 0."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "script, option",
    [
        ("bench_sampling.py", "--n"),  # printed 0 images/s and a ratio, exit 0
        ("bench_sampling.py", "--batch"),  # printed "batched_0_images_per_s", exit 0
        ("bench_sampling.py", "--steps"),  # timed 0-step sampling as the evaluation sampler, exit 0
        ("bench_sampling.py", "--threads"),  # RuntimeError traceback from torch.set_num_threads
        ("bench_fid.py", "--threads"),  # the same traceback
        ("bench_tree.py", "--micro"),  # "range() arg 3 must not be zero" traceback
        ("bench_tree.py", "--size"),  # ZeroDivisionError traceback
        ("bench_train.py", "--steps"),  # ConfigError traceback naming train.max_steps, not --steps
        ("bench_marble.py", "--samples"),
    ],
)
def test_a_zero_size_is_refused_naming_the_option(
    script: str, option: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python bench/SCRIPT OPTION 0`: argparse's usage error naming the option (exit 2), as the benches' other
    sizes (positive_int) already were, before any model loads or anything is timed."""
    threads = torch.get_num_threads()
    monkeypatch.setattr(sys, "argv", [script, option, "0"])
    try:
        with pytest.raises(SystemExit) as info:
            runpy.run_path(str(REPO / "bench" / script), run_name="__main__")
    finally:
        torch.set_num_threads(threads)
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert f"{script}: error: argument {option}: must be at least 1, got 0" in captured.err
    assert captured.out == ""


@pytest.mark.parametrize(
    "script",
    [
        "bench_fid.py",
        "bench_marble.py",
        "bench_sampling.py",
        "bench_threads.py",
        "bench_tree.py",
    ],
)
def test_a_benchs_help_describes_it_with_its_docstrings_whole_first_paragraph(
    script: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--help` showed the docstring's first line, cut mid-sentence ("... sampling speed with one intra-op thread
    against torch's default, side by"); it shows the first paragraph, reflowed by argparse."""
    import ast

    source = (REPO / "bench" / script).read_text()
    first = "".join(ast.get_docstring(ast.parse(source), clean=False).split("\n\n")[0].split())
    monkeypatch.setattr(sys, "argv", [script, "--help"])
    with pytest.raises(SystemExit) as info:
        runpy.run_path(str(REPO / "bench" / script), run_name="__main__")
    assert info.value.code == 0
    assert first in "".join(capsys.readouterr().out.split())  # (argparse reflows it: whitespace aside)


@pytest.mark.parametrize("script, option", [("bench_tree.py", "--steps"), ("bench_fid.py", "--set-size")])
def test_a_size_whose_least_value_is_two_refuses_one_naming_the_option(
    script: str, option: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`bench_tree --steps 1` (a tree needs 2 steps) and `bench_fid --set-size 1` (a covariance needs 2 samples)
    ended in a ValueError traceback after the setup; argparse refuses them naming the option and the least value."""
    monkeypatch.setattr(sys, "argv", [script, option, "1"])
    with pytest.raises(SystemExit) as info:
        runpy.run_path(str(REPO / "bench" / script), run_name="__main__")
    assert info.value.code == 2
    assert f"argument {option}: must be at least 2, got 1" in capsys.readouterr().err


def test_bench_marble_refuses_a_config_error_in_one_line_and_leaves_no_run_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`bench_marble --samples 4` with the default config's groups of 8 ended in a ConfigError traceback; it is
    one line naming the setting. The trainer's run folder, made with mkdtemp, was left in the temp folder by
    every run; it is removed."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["bench_marble.py", "--samples", "4"])
    with pytest.raises(SystemExit) as info:
        runpy.run_path(str(REPO / "bench" / "bench_marble.py"), run_name="__main__")
    assert str(info.value.code).startswith("bench_marble: sampling.group_size=8 does not divide")
    assert list(tmp_path.iterdir()) == []

"""eval/reports.py, mutation round 20: the tests that killed its surviving mutants."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgalign.eval.reports import write_run_report


def _run(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "reward/a/mean": 0.1 * s}) + "\n" for s in range(4))
    )
    return folder


def test_an_out_folder_whose_name_only_starts_with_a_tilde_is_written(tmp_path: Path, monkeypatch) -> None:
    """Only `--out ~` and `--out ~/x` are a shell's unexpanded home (refused: they would make a folder named '~'
    here); a folder named '~old' or '~~' is an ordinary name and gets the report."""
    monkeypatch.chdir(tmp_path)
    run = _run(tmp_path / "run")
    for name in ("~old", "~~"):
        md, plots = write_run_report(run, Path(name))
        assert md == Path(name) / "report.md" and md.read_text().startswith("# Training report: run\n")
        assert plots == [Path(name) / "rewards.png"]
    with pytest.raises(ValueError, match=r"--out '~/x' would be a folder named '~' here"):
        write_run_report(run, Path("~/x"))


def test_an_unknown_compare_key_lists_exactly_25_logged_keys_without_a_mark_of_more(tmp_path: Path) -> None:
    """The unknown-key error shows the first 25 keys the runs log and ' ...' only when there are more: a run that
    logs exactly 25 (its step and 24 metrics) is listed whole, with no ' ...'; one more key gets it."""
    from imgalign.eval.reports import compare_runs

    for n, mark in ((24, ""), (25, " ...")):
        run = tmp_path / f"run{n}"
        run.mkdir()
        row = {"step": 0, **{f"m/k{i:02d}": 0.5 for i in range(n)}}
        (run / "metrics.jsonl").write_text(json.dumps(row) + "\n")
        with pytest.raises(ValueError) as e:
            compare_runs({"a": [run]}, ["reward/nope/mean"], tmp_path / "out")
        shown = ", ".join([*(f"m/k{i:02d}" for i in range(min(n, 25))), "step"][:25])
        assert str(e.value) == (f"no run logs 'reward/nope/mean'; keys these runs log include: {shown}{mark}")

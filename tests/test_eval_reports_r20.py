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

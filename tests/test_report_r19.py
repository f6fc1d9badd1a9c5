"""Mutation round 19: `imgalign report` (imgalign/commands/report.py)."""

from __future__ import annotations

import json
from pathlib import Path

from imgalign.cli import main


def _run(folder: Path, n: int = 4) -> Path:
    folder.mkdir(parents=True)
    rows = [{"step": s, "reward/r/mean": 0.1 * s} for s in range(n)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_an_empty_target_of_one_run_is_refused_as_a_compare_option(tmp_path: Path, capsys) -> None:
    """`report RUN --target "$T"` with T unset: --target applies to --compare only, given empty or not; read as
    not given, the report would be written as if the option were left out."""
    run = _run(tmp_path / "run")
    assert main(["report", str(run), "--target", ""]) == 2
    assert "--target applies to --compare only" in capsys.readouterr().err
    assert not (run / "report").exists()


def test_compare_without_keys_is_refused_saying_what_it_needs(tmp_path: Path, capsys) -> None:
    """--compare with --out but no --keys is refused naming what it needs, before anything is written (only a
    missing --out was tested: without the --keys half of the check, the duplicate-key check read a None list)."""
    run = _run(tmp_path / "run")
    out = tmp_path / "c"
    assert main(["report", "--compare", f"a={run}", "--out", str(out)]) == 2
    assert "--compare needs --keys KEY [KEY ...] and --out DIR" in capsys.readouterr().err
    assert not out.exists()

"""Bad-input round 29: `imgalign report RUN --out DIR` where DIR holds another command's output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgalign.cli import main


def _run(folder: Path) -> Path:
    folder.mkdir()
    rows = [{"step": s, "reward/red/mean": 0.1 * s} for s in (1, 2, 3)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.mark.parametrize("marker", ["eval_args.json", "summary.json"])
def test_report_out_an_evaluation_folder_is_refused(
    marker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`imgalign report RUN --out EVAL` (an `imgalign eval` output folder) replaced the evaluation's report.md with
    the run's, without a word. It is refused, the evaluation's files untouched."""
    run = _run(tmp_path / "run")
    ev = tmp_path / "ev"
    ev.mkdir()
    (ev / marker).write_text("{}\n")
    (ev / "report.md").write_text("# the evaluation's report\n")
    assert main(["report", str(run), "--out", str(ev)]) == 2
    err = capsys.readouterr().err
    assert f"--out '{ev}' holds an `imgalign eval` output ({marker}), whose report.md the run's report" in err
    assert (ev / "report.md").read_text() == "# the evaluation's report\n"
    assert sorted(p.name for p in ev.iterdir()) == sorted([marker, "report.md"])
    # another folder, or the default, takes the report
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) == 0
    assert (tmp_path / "rep" / "report.md").is_file()
    assert main(["report", str(run)]) == 0
    assert (run / "report" / "report.md").is_file()

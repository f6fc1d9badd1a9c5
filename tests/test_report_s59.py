"""Stop 59: `imgalign report` on metrics a custom logger wrote as text, and on values near the float limit."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from imgalign.cli import main


def write_rows(run: Path, rows: list[dict]) -> Path:
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_values_that_are_not_numbers_are_named_in_the_report(tmp_path: Path) -> None:
    """A reward mean logged as text ("0.5") and a KL logged as a list showed as "no finite value" with no word of
    why: the warning above the table counted NaN/inf only."""
    rows = [
        {
            "step": i,
            "reward/geneval/mean": "0.5",
            "policy/kl": [1, 2] if i < 3 else 0.1,
            "policy/clipfrac": 0.0,
        }
        for i in range(1, 6)
    ]
    run = write_rows(tmp_path / "run", rows)
    assert main(["report", str(run)]) == 0
    md = (run / "report" / "report.md").read_text()
    assert (
        "WARNING: values that are not numbers (text, lists, true/false) logged, left out of the table and the "
        "plots: `reward/geneval/mean` 5 of 5 rows, `policy/kl` 2 of 5 rows"
    ) in md
    assert "`policy/clipfrac`" not in md.split("WARNING")[1].split("\n")[0]


def test_a_true_false_value_is_not_a_number_and_numbers_give_no_warning(tmp_path: Path) -> None:
    rows = [
        {"step": i, "reward/geneval/mean": True if i == 2 else 0.5, "policy/kl": 0.01} for i in range(1, 5)
    ]
    run = write_rows(tmp_path / "run", rows)
    assert main(["report", str(run)]) == 0
    md = (run / "report" / "report.md").read_text()
    assert "left out of the table and the plots: `reward/geneval/mean` 1 of 4 rows\n" in md
    clean = write_rows(tmp_path / "clean", [{"step": i, "reward/geneval/mean": 0.5} for i in range(1, 5)])
    assert main(["report", str(clean)]) == 0
    assert "not numbers" not in (clean / "report" / "report.md").read_text()


def test_values_near_the_float_limit_leave_their_plot_out_and_keep_the_report(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """A diverged reward near 1e308 overflowed matplotlib's axis range: `error: arange: cannot compute length`,
    naming no metric, and no report.md. The plot is left out with a warning naming the metric; the other plots and
    report.md are written, and report.md says which plot is missing."""
    rows = [
        {
            "step": i,
            "reward/geneval/mean": 1e308 if i % 2 else -1e308,
            "reward/geneval/std": 1e308,
            "policy/kl": 0.01 * i,
        }
        for i in range(1, 6)
    ]
    run = write_rows(tmp_path / "run", rows)
    with caplog.at_level(logging.WARNING, logger="imgalign.eval.reports"):
        assert main(["report", str(run)]) == 0
    warned = [r.getMessage() for r in caplog.records if "left out rewards.png" in r.getMessage()]
    assert len(warned) == 1 and "reward/geneval/mean" in warned[0] and "1e+308" in warned[0]
    out = run / "report"
    assert not (out / "rewards.png").exists() and (out / "kl.png").is_file()
    md = (out / "report.md").read_text()
    assert "Plots: [kl](kl.png) (not drawn: rewards; the command's warning says why)" in md
    assert "RuntimeWarning" not in capsys.readouterr().err

"""Stop 59: `imgalign report` on metrics a custom logger wrote as text."""

from __future__ import annotations

import json
from pathlib import Path

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

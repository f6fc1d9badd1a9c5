"""eval/reports.py (mutation round 24, second pass): the out-of-order warning names whole-number steps written as
floats as the integers they are, and keeps a fractional step as written."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from imgalign.eval.reports import load_metrics


def test_the_out_of_order_warning_shows_a_float_step_that_is_whole_as_an_integer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in (12.0, 3.0, 2.5)))
    with caplog.at_level(logging.WARNING, logger="imgalign.eval.reports"):
        load_metrics(path)
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.startswith(f"{path}:2: step 3 comes after step 12 (")
    caplog.clear()
    path.write_text("".join(json.dumps({"step": s}) + "\n" for s in (2.5, 1.5)))
    with caplog.at_level(logging.WARNING, logger="imgalign.eval.reports"):
        load_metrics(path)
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.startswith(f"{path}:2: step 1.5 comes after step 2.5 (")


def test_a_missing_eval_log_is_not_called_a_run_that_has_not_finished_a_step(tmp_path: Path) -> None:
    """The "not finished a step" hint is about metrics.jsonl (written after each step); a run folder without an
    eval.jsonl (its in-loop evaluation off) is no such run, and its metrics.jsonl still gets the hint."""
    (tmp_path / "config.yaml").write_text("steps: 1\n")
    with pytest.raises(FileNotFoundError) as e:
        load_metrics(tmp_path / "eval.jsonl")
    assert str(e.value) == (
        f"{tmp_path / 'eval.jsonl'} does not exist; `imgalign report` needs a run folder with metrics.jsonl"
    )
    with pytest.raises(FileNotFoundError, match="is a training run that has not finished a step"):
        load_metrics(tmp_path / "metrics.jsonl")

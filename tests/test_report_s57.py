"""`imgalign report` with odd run folders (own fixes, stop 57)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.cli import main


def test_a_metrics_jsonl_that_is_a_folder_is_named_as_one(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "run" / "metrics.jsonl").mkdir(parents=True)
    metrics = tmp_path / "run" / "metrics.jsonl"
    assert main(["report", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"{metrics} is a folder; `imgalign report` reads the file metrics.jsonl" in err
    assert "does not exist" not in err
    argv = ["report", "--compare", f"a={tmp_path / 'run'}", "--keys", "k", "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert f"{metrics} is a folder" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_steps_out_of_order_are_warned_of_once_naming_the_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two runs pasted into one metrics.jsonl (the trainer writes each step once, in order, and trims the file when
    it resumes) were read in file order without a word, their curves doubling back."""
    import json
    import logging

    from imgalign.eval.reports import load_metrics

    path = tmp_path / "metrics.jsonl"
    steps = [1, 2, 3, 1, 2, 2]
    path.write_text("".join(json.dumps({"step": s, "reward/geneval/mean": 0.1 * s}) + "\n" for s in steps))
    with caplog.at_level(logging.WARNING, logger="imgalign.eval.reports"):
        assert [r["step"] for r in load_metrics(path)] == steps
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.startswith(
        f"{path}:4: step 1 comes after step 3 (a training run writes each step once, in order)"
    )
    caplog.clear()
    path.write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 4)) + '{"loss": 1}\n')
    with caplog.at_level(logging.WARNING, logger="imgalign.eval.reports"):
        load_metrics(path)  # in order; a row without a step is not compared
    assert caplog.records == []

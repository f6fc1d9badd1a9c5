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

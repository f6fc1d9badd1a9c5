"""Bad-input round 30c: `imgalign score --baseline` given an `imgalign eval` results.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from imgalign.cli import main


def test_an_eval_results_file_as_baseline_says_what_it_is_and_what_to_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--baseline EVAL/results.jsonl` (the per-image file `imgalign eval` writes, a natural guess for "the base
    model's scores") said "line 1 is not an `imgalign score` JSONL row ('scores'); pass the .jsonl that `imgalign
    score --out X.jsonl` wrote". It now says the file is an evaluation's results and names its images folder to
    score and the evaluation folder for `imgalign eval --baseline`; nothing is written."""
    ev = tmp_path / "ev"
    ev.mkdir()
    row = {
        "file": "00000/samples/0000.png",
        "sha256": "0" * 64,
        "tag": "single_object",
        "prompt": "a photo of a square",
    }
    row |= {"correct": False, "partial": 0.0, "reason": "expected square>=1, found 0", "error": None}
    (ev / "results.jsonl").write_text(json.dumps(row) + "\n")
    img = tmp_path / "img.png"
    Image.new("RGB", (8, 8)).save(img)
    out = tmp_path / "s.jsonl"
    argv = [
        "score",
        str(img),
        "--reward",
        "artifact",
        "--out",
        str(out),
        "--baseline",
        str(ev / "results.jsonl"),
    ]
    assert main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert (
        f"--baseline '{ev / 'results.jsonl'}' is an `imgalign eval` results.jsonl (judged images, no reward"
        in err
    )
    assert f"score its images ('{ev / 'images'}')" in err
    assert f"`imgalign eval ... --baseline '{ev}'`" in err
    assert not out.exists()


def test_another_row_without_scores_keeps_the_general_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row with neither scores nor an evaluation's fields is not called an evaluation."""
    base = tmp_path / "b.jsonl"
    base.write_text(json.dumps({"file": "a.png", "prompt": "x"}) + "\n")
    img = tmp_path / "img.png"
    Image.new("RGB", (8, 8)).save(img)
    argv = [
        "score",
        str(img),
        "--reward",
        "artifact",
        "--out",
        str(tmp_path / "s.jsonl"),
        "--baseline",
        str(base),
    ]
    assert main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "line 1 is not an `imgalign score` JSONL row" in err
    assert "imgalign eval" not in err

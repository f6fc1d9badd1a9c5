"""eval/suite.py (mutation round 24): a prompt folder with no readable image is said once, in its failure row."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from PIL import Image

from imgalign import shapes as W
from imgalign.eval.shapes_detector import ShapesDetector
from imgalign.eval.suite import judge_folder, write_prompt_folder


def test_a_prompt_folder_of_only_unread_images_is_said_once_in_its_failure_row(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    meta = W.single_object("circle").to_metadata()
    write_prompt_folder(tmp_path / "imgs", 0, meta, [Image.new("RGB", (8, 8))])
    samples = tmp_path / "imgs" / "00000" / "samples"
    (samples / "0000.png").rename(samples / "0000.PNG")
    with caplog.at_level(logging.WARNING, logger="imgalign.eval.suite"):
        summary = judge_folder(tmp_path / "imgs", tmp_path / "ev", ShapesDetector(), progress=False)
    (row,) = [json.loads(x) for x in (tmp_path / "ev" / "results.jsonl").read_text().splitlines()]
    assert summary["n_errors"] == 1 and row["correct"] is False
    assert "the prompt folder holds no image (no samples/*.png); it holds 0000.PNG" in row["error"]
    said = [r.getMessage() for r in caplog.records if r.name == "imgalign.eval.suite"]
    assert said == [row["error"]]

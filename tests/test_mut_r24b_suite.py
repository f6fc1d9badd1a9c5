"""eval/suite.py (mutation round 24, second pass): judge_folder records the judge's own reason for a wrong image and
judges colours with the colour function it is given, not the built-in one."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

from imgalign import shapes as W
from imgalign.eval.geneval import Detections, judge
from imgalign.eval.shapes_detector import ShapesDetector
from imgalign.eval.suite import judge_folder, write_prompt_folder


def _rows(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]


def test_a_wrong_images_row_keeps_the_judges_reason(tmp_path: Path) -> None:
    meta = W.counting("circle", 4).to_metadata()
    img = W.render(W.counting("circle", 3), 0)[0]
    want = judge(img, ShapesDetector()(img), meta).reason
    assert want  # the judge says why three circles are not four
    write_prompt_folder(tmp_path / "imgs", 0, meta, [img])
    judge_folder(tmp_path / "imgs", tmp_path / "ev", ShapesDetector(), progress=False)
    (row,) = _rows(tmp_path / "ev")
    assert row["correct"] is False and row["reason"] == want and row["error"] is None


def test_the_colour_function_given_is_the_one_that_judges(tmp_path: Path) -> None:
    meta = W.colors("red", "circle").to_metadata()
    img = W.render(W.colors("red", "circle"), 0)[0]
    seen: list[str] = []

    def always_blue(image: Image.Image, dets: Detections, cls: str) -> list[str]:
        seen.append(cls)
        return ["blue"] * len(dets)

    write_prompt_folder(tmp_path / "imgs", 0, meta, [img])
    judge_folder(tmp_path / "imgs", tmp_path / "own", ShapesDetector(), progress=False)
    judge_folder(tmp_path / "imgs", tmp_path / "blue", ShapesDetector(), color_fn=always_blue, progress=False)
    assert _rows(tmp_path / "own")[0]["correct"] is True  # the built-in colour judge sees red
    (row,) = _rows(tmp_path / "blue")
    assert seen == ["circle"] and row["correct"] is False and row["error"] is None

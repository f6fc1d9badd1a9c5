"""eval/suite.py, mutation round 20: the tests that killed its surviving mutants."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image, PngImagePlugin

from imgalign import shapes as W
from imgalign.eval.shapes_detector import ShapesDetector
from imgalign.eval.suite import judge_folder, write_prompt_folder


def _rows(ev: Path) -> list[dict]:
    return [json.loads(x) for x in (ev / "results.jsonl").read_text().splitlines()]


def test_a_png_whose_text_chunk_pil_refuses_is_a_failure_row_and_the_rest_is_judged(tmp_path: Path) -> None:
    """PIL raises ValueError (not OSError) opening a PNG whose compressed text chunk (an embedded workflow, say)
    unpacks past its MAX_TEXT_CHUNK: that image gets a failure row naming it, the others are judged, and the
    summary is written (a ValueError stopped the whole evaluation)."""
    imgs, ev = tmp_path / "imgs", tmp_path / "ev"
    white = Image.new("RGB", (64, 64), (255, 255, 255))
    write_prompt_folder(imgs, 0, W.single_object("circle").to_metadata(), [white, white])
    info = PngImagePlugin.PngInfo()
    info.add_text("workflow", "a" * (2 * PngImagePlugin.MAX_TEXT_CHUNK), zip=True)
    bad = imgs / "00000" / "samples" / "0001.png"
    white.save(bad, pnginfo=info)
    s = judge_folder(imgs, ev, ShapesDetector(), progress=False)
    rows = _rows(ev)
    assert [r["file"] for r in rows] == ["00000/samples/0000.png", "00000/samples/0001.png"]
    assert rows[0]["error"] is None
    assert rows[1]["correct"] is False
    assert rows[1]["error"].startswith(f"cannot read image {bad}: ") and "MAX_TEXT_CHUNK" in rows[1]["error"]
    assert (s["n_images"], s["n_errors"]) == (2, 1)
    assert (ev / "summary.json").is_file() and (ev / "report.md").is_file()

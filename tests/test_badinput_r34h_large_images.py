"""Bad-input round 34h: an image over PIL's decompression-bomb warning limit (read, not refused) is named."""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path

import pytest
from PIL import Image

from imgalign import shapes as W
from imgalign.cli import main
from imgalign.eval.suite import write_prompt_folder

SPEC = W.single_object("circle")


def test_score_and_eval_name_an_image_over_pils_warning_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """PIL warns of an image of 89 to 179 million pixels (twice its limit is refused) with "Image size (100000000
    pixels) exceeds limit of 89478485 pixels, could be decompression bomb DOS attack." from PIL/Image.py, naming no
    file: a folder scored with 4.7 GB of memory said nothing of which image. (The limit is lowered here: 64x64 is
    over 3000 and under twice it.)"""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 3000)
    gen = tmp_path / "gen"
    write_prompt_folder(gen, 0, SPEC.to_metadata(), [W.render(SPEC, 0)[0]])
    sample = gen / "00000" / "samples" / "0000.png"
    out = tmp_path / "s.jsonl"
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)  # PIL's own, unnamed, is not shown
        with caplog.at_level(logging.WARNING):
            assert main(["score", str(gen), "--reward", "geneval", "--no-progress", "--out", str(out)]) == 0
            assert f"{sample} is 64x64 pixels, over PIL's limit of 3000" in caplog.text
            caplog.clear()
            assert main(["eval", "--images", str(gen), "--no-progress", "--out", str(tmp_path / "ev")]) == 0
            assert f"{sample} is 64x64 pixels, over PIL's limit of 3000" in caplog.text
    assert json.loads(out.read_text())["scores"] == {"geneval": 1.0}
    assert json.loads((tmp_path / "ev" / "summary.json").read_text())["overall"] == 1.0

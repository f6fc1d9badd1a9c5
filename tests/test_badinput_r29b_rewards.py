"""Bad-input round 29 (second pass): reward specs naming a file where a folder goes."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from imgalign.cli import main


def test_score_names_a_clip_model_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """clip:model=<an image file, or the weights file itself> said "no such folder" of a file that is there."""
    images = tmp_path / "images"
    images.mkdir()
    Image.new("RGB", (8, 8)).save(images / "a.png")
    weights = tmp_path / "open_clip_model.safetensors"
    weights.write_bytes(b"x")
    out = tmp_path / "s.jsonl"
    args = ["score", str(images), "--reward", f"clip:model={weights}", "--out", str(out), "--no-progress"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "it is a file, not a folder; give the folder holding open_clip_config.json" in err
    assert "no such folder" not in err and not out.exists()

"""Bad input, round 35i: images of extreme aspect ratio through `imgalign score`. The rewards resize the short side
to their input size first (CLIP's shortest-edge resize), so a 60000x1 PNG of 256 bytes took 3.7 GB in `--reward clip`
and was scored, while `--reward artifact` refused it ("at least 3x3 pixels"). An image over MAX_ASPECT:1 now gets an
error row naming it and its size, for every reward, before it is decoded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from imgalign.cli import main
from imgalign.rewards.io import MAX_ASPECT


def test_an_image_over_the_aspect_limit_gets_an_error_row_and_one_at_it_is_scored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    images = tmp_path / "imgs"
    images.mkdir()
    rng = np.random.default_rng(0)
    for name, (w, h) in {"at.png": (3 * MAX_ASPECT, 3), "over.png": (3, 3 * MAX_ASPECT + 1)}.items():
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(images / name)
    out = tmp_path / "s.jsonl"
    assert main(["score", str(images), "--reward", "artifact", "--no-progress", "--out", str(out)]) == 1
    at, over = (json.loads(line) for line in out.read_text().splitlines())
    assert at["error"] is None and "artifact" in at["scores"]
    assert over["scores"] == {}
    assert over["error"].startswith(
        f"{images / 'over.png'}: 3x{3 * MAX_ASPECT + 1} pixels, over {MAX_ASPECT}:1"
    )
    assert f"crop it (or pad it) to at most {MAX_ASPECT}:1" in over["error"]
    assert "1 fully scored, 1 with errors" in capsys.readouterr().out

"""`imgalign score`: an image whose read fails with an OSError without text is an error row, not a silent pass
(stop 66; round 29a's note on score.py:717)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgalign import shapes as W
from imgalign.cli import main
from imgalign.eval.suite import write_prompt_folder
from imgalign.rewards import io


def test_an_oserror_without_text_is_an_error_and_the_exit_status_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = W.single_object("circle")
    imgs = tmp_path / "gen"
    write_prompt_folder(imgs, 0, spec.to_metadata(), [W.render(spec, i)[0] for i in range(2)])
    real = io.read_image

    def read(path, *args, **kwargs):
        if Path(path).name == "0001.png":
            raise OSError()  # str() is ""
        return real(path, *args, **kwargs)

    monkeypatch.setattr(io, "read_image", read)
    out = tmp_path / "s.jsonl"
    argv = ["score", str(imgs), "--reward", "geneval:mode=strict", "--no-progress"]
    assert main([*argv, "--out", str(out)]) == 1  # was 0
    rows = {Path(r["file"]).name: r for r in map(json.loads, out.read_text().splitlines())}
    bad = imgs / "00000" / "samples" / "0001.png"
    assert rows["0001.png"]["scores"] == {} and rows["0001.png"]["error"] == f"OSError reading {bad}"
    assert rows["0000.png"]["error"] is None and rows["0000.png"]["scores"]

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


def test_the_model_hint_orders_checkpoints_by_step_not_by_name(tmp_path: Path) -> None:
    """Past step 999999 (and beside a superseded checkpoint) the hint named an older checkpoint (round 29a's note
    on score.py:552)."""
    from imgalign.commands.score import _model_folder_hint

    run = tmp_path / "run"
    for name in ("step-999999", "step-1000000", "superseded-step-000005"):
        ckpt = run / "checkpoints" / name
        ckpt.mkdir(parents=True)
        (ckpt / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusion3Pipeline"}))
    hint = _model_folder_hint([str(run)])
    assert hint.startswith(f": {str(run / 'checkpoints' / 'step-1000000')!r} is a model"), hint

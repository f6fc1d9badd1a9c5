"""Round 29a mutation survivors in imgalign/commands/score.py: check_replaceable's first-line read and the model
folder hint's choice of checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    "content",
    [
        # a prompt list after blank lines: its first non-blank line is what decides, not the blank first line
        b'\n\n{"file": "a.png", "prompt": "a red circle"}\n',
        # bytes that are not UTF-8 (an image saved under the name): refused by message, not a decode error
        b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x00",
    ],
    ids=["blank-lines-then-a-prompt-row", "not-utf8"],
)
def test_an_out_whose_first_line_is_not_a_score_row_is_refused(tmp_path: Path, content: bytes) -> None:
    from imgalign.cli import CLIError
    from imgalign.commands.score import check_replaceable

    out = tmp_path / "s.jsonl"
    out.write_bytes(content)
    with pytest.raises(CLIError, match=r"exists and is not an `imgalign score` output"):
        check_replaceable(out)
    assert out.read_bytes() == content


def test_a_runs_model_hint_names_its_latest_complete_checkpoint(tmp_path: Path) -> None:
    """With two complete checkpoints in a run's checkpoints/, the hint names the later step."""
    from imgalign.commands.score import _model_folder_hint

    run = tmp_path / "run"
    for step in ("step-000001", "step-000002"):
        ckpt = run / "checkpoints" / step
        ckpt.mkdir(parents=True)
        (ckpt / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusion3Pipeline"}))
    latest = run / "checkpoints" / "step-000002"
    for given in (run, run / "checkpoints"):
        hint = _model_folder_hint([str(given)])
        assert hint.startswith(f": {str(latest)!r} is a model"), hint

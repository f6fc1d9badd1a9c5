"""score's model-folder hint: folders other than a run's step-N checkpoints are tried by name, whatever order the
file system lists them in (round 29j mutant: the name dropped from the sort key survived)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.parametrize("listed", [sorted, lambda xs: sorted(xs, reverse=True)], ids=["forward", "reverse"])
def test_other_model_folders_are_tried_by_name(listed, tmp_path: Path, monkeypatch) -> None:
    from imgalign.commands.score import _model_folder_hint

    for name in ("pipe-a", "pipe-b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model_index.json").write_text(
            json.dumps({"_class_name": "StableDiffusion3Pipeline"})
        )
    real = Path.iterdir
    monkeypatch.setattr(Path, "iterdir", lambda self: iter(listed(real(self))))
    assert _model_folder_hint([str(tmp_path)]).startswith(f": {str(tmp_path / 'pipe-a')!r} is a model")

"""Bad-input round 28: output folders of another command given to `imgalign train --output-dir`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from imgalign.cli import main
from imgalign.trainers.testing import one_step_config, write_config

torch.set_num_threads(1)


@pytest.mark.parametrize(
    ("marker", "what"),
    [
        ("eval_args.json", "an `imgalign eval` output"),
        ("model_index.json", "a model folder"),
        ("config.json", "a model folder"),
        ("open_clip_config.json", "a model folder"),
    ],
)
def test_train_refuses_an_output_dir_that_holds_another_commands_output(
    sd3_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], marker: str, what: str
) -> None:
    """`imgalign train --output-dir EVAL_OUT` (or a saved model's folder) trained into it: its config.yaml,
    metrics.jsonl and checkpoints/ were mixed among the evaluation's results (or the model's parts), while
    `imgalign eval --out RUN` is refused. The run is refused before any model loads, and the folder is untouched."""
    out = tmp_path / "other"
    out.mkdir()
    (out / marker).write_text(json.dumps({"suite": "shapes"}))
    (out / "summary.json").write_text("{}")
    cfg = write_config(one_step_config(sd3_dir, tmp_path / "unused"), tmp_path / "c.yaml")
    assert main(["train", str(cfg), "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--output-dir {str(out)!r} is {what} ({marker}), not a run folder" in err
    assert "give a new or empty --output-dir" in err
    assert sorted(p.name for p in out.iterdir()) == sorted([marker, "summary.json"])


def test_train_still_takes_a_new_folder_and_its_own_run_folder(sd3_dir: Path, tmp_path: Path) -> None:
    """The check leaves a fresh folder, and a run folder resumed (which holds config.yaml, not config.json)."""
    out = tmp_path / "run"
    cfg = write_config(one_step_config(sd3_dir, out), tmp_path / "c.yaml")
    assert main(["train", str(cfg)]) == 0
    assert main(["train", str(cfg), "--resume", "auto", "--max-steps", "2"]) == 0
    assert (out / "checkpoints" / "step-000002").is_dir()

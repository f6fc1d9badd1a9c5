"""Mutation round 26 (trainers/checkpoint.py): the damaged-file error for a file outside trainer_state/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgalign.trainers import checkpoint as C


def _ckpt(run: Path, step: int) -> Path:
    p = run / "checkpoints" / C.checkpoint_name(step)
    (p / "trainer_state").mkdir(parents=True)
    (p / "trainer_state" / "state.json").write_text(json.dumps({"step": step}))
    return p


def test_a_damaged_file_at_a_checkpoints_top_level_names_that_checkpoint(tmp_path: Path) -> None:
    """read_json of a checkpoint's own top-level file (imgalign_model.json, beside trainer_state/) names the
    checkpoint it belongs to and advises the run's earlier one. A mutant that always took the file's grandparent
    as the checkpoint called the run's checkpoints/ folder the damaged checkpoint and advised nothing to resume."""
    run = tmp_path / "run"
    first, second = _ckpt(run, 1), _ckpt(run, 2)
    bad = second / "imgalign_model.json"
    bad.write_text("{")
    with pytest.raises(C.CheckpointReadError) as e:
        C.read_json(bad)
    assert f"checkpoint {second} is damaged" in str(e.value)
    assert f"--resume {first})" in str(e.value)

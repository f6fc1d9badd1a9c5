"""Round 28c mutants of trainers/checkpoint.py that the suite let through."""

from __future__ import annotations

import json
from pathlib import Path

from imgalign.trainers import checkpoint as C


def _ckpt(run: Path, name: str, step: int) -> Path:
    p = run / "checkpoints" / name
    (p / "trainer_state").mkdir(parents=True)
    (p / "trainer_state" / "state.json").write_text(json.dumps({"step": step}))
    return p


def test_a_users_old_folder_that_is_not_a_step_is_left_alone(tmp_path: Path) -> None:
    """Only step-N.old is a save's leftover: a user's backup.old (a checkpoint copied by hand) is neither renamed
    over the user's own backup/ folder nor is that folder deleted."""
    run = tmp_path / "run"
    _ckpt(run, "backup.old", 4)
    mine = run / "checkpoints" / "backup"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    C.remove_leftovers(run)
    assert (run / "checkpoints" / "backup.old" / "trainer_state" / "state.json").is_file()
    assert (mine / "notes.txt").read_text() == "mine"

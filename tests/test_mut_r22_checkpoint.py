"""Checkpoint behaviour no earlier test pinned down (mutation round 22): the order of checkpoints past six digits of
step, and a prune killed while it deletes, on hand-made folders (no model loads)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from imgalign.trainers import checkpoint as C


def _ckpt(run: Path, step: int) -> Path:
    """A hand-made complete checkpoint folder of `run` with one weights file beside its state.json."""
    p = run / "checkpoints" / C.checkpoint_name(step)
    (p / "trainer_state").mkdir(parents=True)
    (p / "trainer_state" / "state.json").write_text(json.dumps({"step": step, "num_processes": 1}))
    (p / "trainer_state" / "trainable.safetensors").write_text("weights")
    return p


def test_checkpoints_past_six_digits_of_step_are_ordered_by_step_not_by_name(tmp_path):
    """step-1000000 sorts before step-999999 by name: --resume auto and keep_last go by the step number, so the
    newest is step 1000000 and a prune to one keeps it."""
    for step in (1_000_000, 999_999, 5):
        _ckpt(tmp_path, step)
    assert [C.step_of(p) for p in C.list_checkpoints(tmp_path)] == [5, 999_999, 1_000_000]
    assert C.latest_checkpoint(tmp_path) == tmp_path / "checkpoints" / "step-1000000"
    C.prune(tmp_path, 1)
    assert [p.name for p in C.list_checkpoints(tmp_path)] == ["step-1000000"]


def test_a_prune_killed_while_deleting_leaves_no_partial_checkpoint_listed(tmp_path, monkeypatch):
    """A checkpoint is renamed away (.trash-step-N) before its files are deleted, so a kill half-way through the
    deletion leaves nothing that --resume auto would take for a complete checkpoint; the next prune removes the
    rest."""
    for step in (1, 2, 3):
        _ckpt(tmp_path, step)
    real_rmtree = shutil.rmtree

    def killed_mid_delete(path, ignore_errors=False, **kw):  # deletes the weights, then the process dies
        weights = Path(path) / "trainer_state" / "trainable.safetensors"
        if weights.is_file():
            weights.unlink()
            raise KeyboardInterrupt("killed while deleting")
        real_rmtree(path, ignore_errors=ignore_errors, **kw)

    monkeypatch.setattr(C.shutil, "rmtree", killed_mid_delete)
    with pytest.raises(KeyboardInterrupt):
        C.prune(tmp_path, 2)
    monkeypatch.setattr(C.shutil, "rmtree", real_rmtree)
    listed = C.list_checkpoints(tmp_path)
    assert [p.name for p in listed] == ["step-000002", "step-000003"]
    assert all((p / "trainer_state" / "trainable.safetensors").is_file() for p in listed)
    C.prune(tmp_path, 2)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-000002", "step-000003"]


def test_a_second_run_into_a_locked_output_folder_is_refused(tmp_path, monkeypatch):
    """While one run holds out/.lock, a second run's lock_output_dir (another process: its own open of the file and
    no lock of its own on record) is refused, not granted a lock shared with the first."""
    out = tmp_path / "run"
    out.mkdir()
    assert C.lock_output_dir(out) is True
    try:
        with monkeypatch.context() as m:
            m.setattr(C, "_HELD_LOCKS", {})  # the second process has taken no lock yet
            assert C.lock_output_dir(out) is False
            assert C._HELD_LOCKS == {}
    finally:
        C.unlock_output_dir(out)
    assert C.lock_output_dir(out) is True  # freed by unlock: the next run takes it
    C.unlock_output_dir(out)

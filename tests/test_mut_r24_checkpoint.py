"""Mutation round 24: checkpoint behaviour the stage-1 checkpoint tests left open (write errors, the output-folder
lock, damaged files, superseding and publishing), on hand-made folders (no model loads)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import torch

from imgalign.trainers import checkpoint as C


def _ckpt(run: Path, name: str, step: int) -> Path:
    p = run / "checkpoints" / name
    (p / "trainer_state").mkdir(parents=True)
    state = {"step": step, "num_processes": 1, "config_hash": "x"}
    (p / "trainer_state" / "state.json").write_text(json.dumps(state))
    return p


def test_a_folder_named_like_a_step_outside_checkpoints_is_not_part_of_a_run(tmp_path: Path) -> None:
    """Only a run's checkpoints/step-N is a checkpoint by its name: a run folder of the user's that happens to be
    called step-000001 may be trained into."""
    own = tmp_path / "step-000001"
    own.mkdir()
    assert C.inside_run(own) is None
    assert C.list_checkpoints(tmp_path / "fresh") == []  # no checkpoints/ yet: nothing, not an error


def test_a_non_contiguous_tensor_is_saved(tmp_path: Path) -> None:
    """safetensors refuses a non-contiguous tensor (a transposed weight): save_tensors makes each contiguous."""
    w = torch.arange(6.0).reshape(2, 3).t()
    assert not w.is_contiguous()
    C.save_tensors(tmp_path / "t.safetensors", {"w": w})
    assert torch.equal(C.load_tensors(tmp_path / "t.safetensors")["w"], w)


def test_write_failure_is_one_line_with_the_reason() -> None:
    """The OS's reason when it gives one; else the type and the first line of the message (torch's zip writer adds
    a C++ stack below it); an OSError without an errno is not 'None'."""
    assert C.write_failure(OSError(errno.ENOSPC, "No space left on device")) == "No space left on device"
    assert C.write_failure(OSError("quota")) == "OSError: quota"
    err = RuntimeError(
        "[enforce fail at inline_container.cc:595] . unexpected pos 128 vs 64\nframe #0: c10::..."
    )
    assert (
        C.write_failure(err)
        == "RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 128 vs 64"
    )


def test_a_file_system_without_flock_trains_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Lustre without -o flock (ENOSYS): the lock cannot be taken, and the run goes on, saying so."""
    import fcntl

    def no_flock(fd: int, op: int) -> None:
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    with caplog.at_level("WARNING"):
        assert C.lock_output_dir(tmp_path, "imgalign pretrain") is True
    assert "cannot lock" in caplog.text and "a second imgalign pretrain started into" in caplog.text
    C.unlock_output_dir(tmp_path)


def test_the_lock_is_taken_again_in_process_under_another_spelling_of_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume in the same process may name the folder relatively (or by a link): the same lock, not a refusal."""
    out = tmp_path / "run"
    out.mkdir()
    try:
        assert C.lock_output_dir(out)
        monkeypatch.chdir(tmp_path)
        assert C.lock_output_dir(Path("run"))
        assert C.lock_output_dir(Path("run") / ".." / "run")
    finally:
        C.unlock_output_dir(out)


def test_a_state_json_that_is_not_text_is_named_as_damaged(tmp_path: Path) -> None:
    ckpt = _ckpt(tmp_path / "run", "step-000002", 2)
    (ckpt / "trainer_state" / "state.json").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(C.CheckpointReadError, match=r"state\.json cannot be read \(UnicodeDecodeError"):
        C.read_state(ckpt)


def test_a_cut_safetensors_file_is_named_as_damaged(tmp_path: Path) -> None:
    path = tmp_path / "run" / "checkpoints" / "step-000002" / "trainer_state" / "trainable.safetensors"
    path.parent.mkdir(parents=True)
    C.save_tensors(path, {"w": torch.ones(64)})
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(C.CheckpointReadError, match=r"trainable\.safetensors cannot be read"):
        C.load_tensors(path)


def test_step_of_names_a_folder_that_is_not_a_checkpoint() -> None:
    with pytest.raises(
        ValueError, match=r"best is not a checkpoint folder \(expected a name like step-000040\)"
    ):
        C.step_of(Path("runs/x/best"))


def test_a_step_superseded_three_times_keeps_every_branch(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for _ in range(3):
        _ckpt(run, "step-000004", 4)
        C.supersede_after(run, 2)
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == ["superseded-step-000004", "superseded-step-000004-1", "superseded-step-000004-2"]


def test_an_incomplete_step_folder_does_not_block_putting_its_old_copy_back(tmp_path: Path) -> None:
    """A crash while replacing step-N left step-N.old (whole) and a partial step-N: the old copy is put back."""
    run = tmp_path / "run"
    _ckpt(run, "step-000004.old", 4)
    partial = run / "checkpoints" / "step-000004"
    (partial / "transformer").mkdir(parents=True)
    (partial / "transformer" / "half.bin").write_bytes(b"x")
    C.remove_leftovers(run)
    assert [p.name for p in C.list_checkpoints(run)] == ["step-000004"]
    assert not (run / "checkpoints" / "step-000004.old").exists()


def test_finalize_replaces_a_checkpoint_despite_a_leftover_old_copy(tmp_path: Path) -> None:
    """A step-N.old left by an earlier crash does not stop the same step from being published again."""
    run = tmp_path / "run"
    final = _ckpt(run, "step-000004", 4)
    _ckpt(run, "step-000004.old", 4)
    tmp = run / "checkpoints" / ".tmp-step-000004"
    (tmp / "trainer_state").mkdir(parents=True)
    (tmp / "trainer_state" / "state.json").write_text(json.dumps({"step": 4, "new": True}))
    C.finalize(tmp, final)
    assert json.loads((final / "trainer_state" / "state.json").read_text())["new"] is True
    assert not tmp.exists() and not (run / "checkpoints" / "step-000004.old").exists()
    assert os.listdir(run / "checkpoints") == ["step-000004"]

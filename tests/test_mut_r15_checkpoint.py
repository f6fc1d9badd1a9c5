"""Checkpoint behaviour no earlier test pinned down (mutation round 15): which folders are parts of a run, which step
folders a resume passes over, and the damaged-checkpoint checks, on hand-made folders (no model loads)."""

from __future__ import annotations

import json
from pathlib import Path

from imgalign.trainers import checkpoint as C


def _ckpt(run: Path, step: int, complete: bool = True, name: str | None = None) -> Path:
    """A hand-made checkpoint folder of `run` (state.json only when `complete`)."""
    p = run / "checkpoints" / (name or C.checkpoint_name(step))
    (p / "trainer_state").mkdir(parents=True)
    if complete:
        state = {"step": step, "num_processes": 1, "config_hash": "x"}
        (p / "trainer_state" / "state.json").write_text(json.dumps(state))
    return p


def test_a_checkpoint_is_part_of_a_run_wherever_it_lies_and_a_superseded_one_too(tmp_path):
    """inside_run: a folder holding trainer_state/ is a checkpoint also outside a checkpoints/ folder (a copy), and
    so is a run's superseded-step-N branch; a run folder and a checkpoints/ folder with no complete checkpoint are
    not parts of a run."""
    copy = tmp_path / "my_copy"
    (copy / "trainer_state").mkdir(parents=True)
    assert C.inside_run(copy) == "a checkpoint folder"
    run = tmp_path / "run"
    _ckpt(run, 4, name="superseded-step-000004-1")
    assert C.inside_run(run / "checkpoints" / "superseded-step-000004-1") == "a checkpoint folder"
    assert C.inside_run(run / "checkpoints") is None  # only a superseded one: no complete checkpoint listed
    _ckpt(run, 2)
    assert C.inside_run(run / "checkpoints") == "the checkpoints folder of a run"
    assert C.inside_run(run) is None and C.inside_run(tmp_path / "absent") is None
    # by its name alone, also when its trainer_state/ is gone
    for name in ("superseded-step-000006", "step-000008"):
        (run / "checkpoints" / name).mkdir()
        assert C.inside_run(run / "checkpoints" / name) == "a checkpoint folder", name


def test_incomplete_after_lists_the_later_step_folders_without_state_json_oldest_first(tmp_path):
    """incomplete_after: the step-N folders after the given checkpoint that lack trainer_state/state.json (also
    when trainer_state/ itself was written), oldest first; complete, earlier and non-step folders are left out."""
    run = tmp_path / "run"
    done = _ckpt(run, 2)
    _ckpt(run, 1, complete=False)
    _ckpt(run, 5)
    late = [_ckpt(run, 12, complete=False), _ckpt(run, 3, complete=False)]
    (run / "checkpoints" / "step-000007").mkdir()
    (run / "checkpoints" / "step-x").mkdir()
    (run / "checkpoints" / "step-000009").write_text("")  # a file, not a folder
    want = [run / "checkpoints" / n for n in ("step-000003", "step-000007", "step-000012")]
    assert C.incomplete_after(run, done) == want and late[0] == want[-1]
    assert C.incomplete_after(run, None)[0] == run / "checkpoints" / "step-000001"


def test_rng_state_restores_numpys_position_in_its_key_and_torchs_cpu_stream():
    """A resume continues NumPy's legacy stream from the position the checkpoint was taken at (the key alone, read
    from position 0, repeats earlier draws) and torch's CPU stream where it was."""
    import numpy as np
    import torch

    np.random.seed(3)
    torch.manual_seed(3)
    np.random.random(5), torch.rand(2)  # NumPy's position is now 10 words into the key
    js, tensors = C.rng_state()
    want = np.random.random(3).tolist(), torch.rand(3).tolist()
    np.random.seed(9)
    torch.manual_seed(9)
    C.set_rng_state(json.loads(json.dumps(js)), tensors)
    assert (np.random.random(3).tolist(), torch.rand(3).tolist()) == want


def _whole_files(ckpt: Path) -> None:
    """Give hand-made checkpoint `ckpt` one whole file of each kind damaged_files reads."""
    import torch
    from safetensors.torch import save_file

    st = ckpt / "trainer_state"
    save_file({"w": torch.ones(2)}, str(st / "trainable.safetensors"))
    torch.save({"a": 1}, str(st / "optimizer.pt"))


def test_damaged_files_names_each_cut_or_unparsable_file_of_a_checkpoint(tmp_path):
    """damaged_files: [] for a whole checkpoint; a cut .safetensors, a .pt that is no zip archive, a .json that does
    not parse, each named (sorted); a folder without trainer_state/ is named by that folder alone."""
    ckpt = _ckpt(tmp_path / "run", 2)
    _whole_files(ckpt)
    assert C.damaged_files(ckpt) == []
    st = ckpt / "trainer_state"
    for name in ("trainable.safetensors", "optimizer.pt"):
        (st / name).write_bytes((st / name).read_bytes()[:20])
    (st / "rng_0.json").write_text('{"python": ')
    (st / "notes.txt").write_text("not checked")
    assert C.damaged_files(ckpt) == [st / "optimizer.pt", st / "rng_0.json", st / "trainable.safetensors"]
    bare = tmp_path / "run" / "checkpoints" / "step-000003"
    (bare / "transformer").mkdir(parents=True)
    (bare / "transformer" / "config.json").write_text("{")
    assert C.damaged_files(bare) == [bare / "trainer_state"]


def test_a_damaged_checkpoint_advises_the_newest_whole_earlier_one_or_says_all_are_damaged(tmp_path):
    """The CheckpointReadError of a damaged file names the file and its checkpoint, says "missing" only for a
    missing file, and advises --resume with the newest earlier checkpoint whose files are whole (not a damaged
    one, not the oldest); when every earlier one is damaged it says so and names a damaged file."""
    run = tmp_path / "run"
    ckpts = {s: _ckpt(run, s) for s in (1, 2, 3, 4)}
    for c in ckpts.values():
        _whole_files(c)
    bad = ckpts[3] / "trainer_state" / "optimizer.pt"
    bad.write_bytes(b"cut")
    target = ckpts[4] / "trainer_state" / "scheduler.pt"
    err = str(C._unreadable(target, FileNotFoundError(2, "No such file")))
    assert f"{target} cannot be read (missing): checkpoint {ckpts[4]} is damaged" in err
    assert f"--resume {ckpts[2]})" in err
    err = str(C._unreadable(target, RuntimeError("PytorchStreamReader failed")))
    assert "cannot be read (RuntimeError: PytorchStreamReader failed)" in err and "(missing)" not in err
    for s in (1, 2):
        (ckpts[s] / "trainer_state" / "rng_0.json").write_text("{")
    err = " ".join(str(C._unreadable(target, FileNotFoundError())).split())
    assert f"The run's earlier checkpoints in {run / 'checkpoints'} are damaged too (e.g. {bad})" in err
    assert "--resume" not in err


def test_state_problem_names_what_makes_a_state_json_not_the_trainers(tmp_path):
    """state_problem: None for the trainer's object; a JSON list, a missing needed key, a step or process count
    that is a bool, negative or a string, and a non-string config hash are each named; read_state checks the keys
    its caller needs (a resume: num_processes), not just the step."""
    import pytest

    ok = {"step": 2, "num_processes": 1, "config_hash": "x"}
    assert C.state_problem(ok, ("step", "num_processes")) is None
    assert C.state_problem([ok]) == "it holds a JSON list, not an object"
    assert C.state_problem({"num_processes": 1}) == "it has no 'step'"
    for key, value, kind in (
        ("step", True, "a whole number"),
        ("step", -1, "a whole number"),
        ("num_processes", True, "a whole number"),
        ("num_processes", "2", "a whole number"),
        ("config_hash", 3, "a string"),
    ):
        assert C.state_problem({**ok, key: value}) == f"its {key!r} is {value!r}, not {kind}", key
    ckpt = _ckpt(tmp_path / "run", 2)
    path = ckpt / "trainer_state" / "state.json"
    path.write_text('{"step": 2}')
    assert C.read_state(ckpt) == {"step": 2}
    with pytest.raises(C.CheckpointReadError, match="it has no 'num_processes'"):
        C.read_state(ckpt, ("step", "num_processes"))


def test_the_output_folder_lock_refuses_a_holder_of_another_open_and_is_freed_by_unlock(tmp_path):
    """lock_output_dir is False while another open file description holds out/.lock (as another process would),
    True once it is free; unlock_output_dir closes the lock, so a fresh open of the file can take it."""
    import fcntl
    import os

    out = tmp_path / "run"
    out.mkdir()
    other = os.open(out / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert C.lock_output_dir(out) is False
        fcntl.flock(other, fcntl.LOCK_UN)
        assert C.lock_output_dir(out) is True
        C.unlock_output_dir(out)
        # raises BlockingIOError while the lock is still held
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(other)
        C.unlock_output_dir(out)


def test_prune_sets_aside_every_step_after_the_newest_and_supersede_returns_the_new_paths(tmp_path):
    """prune(newest=step 3): steps 4 and 5 left by an earlier run are renamed superseded-step-N (moved, not
    copied: --resume auto must not list them), then the last keep_last of the rest are kept; supersede_after
    returns the new folders."""
    run = tmp_path / "run"
    for s in range(1, 6):
        _ckpt(run, s)
    C.prune(run, 2, newest=run / "checkpoints" / "step-000003")
    assert [p.name for p in C.list_checkpoints(run)] == ["step-000002", "step-000003"]
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == ["step-000002", "step-000003", "superseded-step-000004", "superseded-step-000005"]
    moved = C.supersede_after(run, 2)
    assert moved == [run / "checkpoints" / "superseded-step-000003"] and moved[0].is_dir()
    assert C.latest_checkpoint(run) == run / "checkpoints" / "step-000002"


def test_finalize_gives_the_checkpoints_files_the_mode_open_gives(tmp_path):
    """A published checkpoint's files are readable as open() makes them (0o666 less the umask), also those a
    writer made 0600 (safetensors does)."""
    import os

    from imgalign.files import _umask

    tmp = tmp_path / "checkpoints" / ".tmp-step-000001"
    (tmp / "trainer_state").mkdir(parents=True)
    f = tmp / "trainer_state" / "trainable.safetensors"
    f.write_bytes(b"x")
    os.chmod(f, 0o600)
    final = tmp_path / "checkpoints" / "step-000001"
    C.finalize(tmp, final)
    assert (final / "trainer_state" / "trainable.safetensors").stat().st_mode & 0o777 == 0o666 & ~_umask()

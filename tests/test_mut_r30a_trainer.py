"""trainers/trainer.py, mutation round 30a: behaviour the round's surviving mutants showed untested."""

from __future__ import annotations

from test_train import _sgd_trainer


def test_a_save_writes_over_the_hidden_folder_a_killed_save_of_its_step_left(sd3_dir, tmp_path):
    """A save killed outright (SIGKILL: no except clause runs) leaves checkpoints/.tmp-step-N; the next save of
    step N starts that folder afresh (without it: FileExistsError, or the old files published with the new)."""
    tr = _sgd_trainer(sd3_dir, tmp_path)
    left = tmp_path / "run" / "checkpoints" / ".tmp-step-000002" / "trainer_state"
    left.mkdir(parents=True)
    (left / "stale.pt").write_bytes(b"half")
    final = tr.save(2)
    assert final.name == "step-000002" and (final / "trainer_state" / "state.json").is_file()
    assert not (final / "trainer_state" / "stale.pt").exists()
    assert sorted(p.name for p in final.parent.iterdir()) == ["step-000002"]

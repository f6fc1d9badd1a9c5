"""Bad input, round 33g: commands that write, on a disk that fills up mid-write."""

import errno

import pytest
from test_train import _sgd_trainer


def test_a_checkpoint_save_cut_short_by_a_full_disk_leaves_no_half_written_folder(
    sd3_dir, tmp_path, monkeypatch
):
    """`imgalign train` on a disk that filled during a checkpoint save said "free space and continue with --resume
    auto", and left checkpoints/.tmp-step-N behind: the half-written checkpoint (15 MB of a 15 MB disk in the trial),
    hidden by its dot name, held the very space the user was told to free. The run's earlier checkpoint is kept."""
    from imgalign.trainers import checkpoint as C

    tr = _sgd_trainer(sd3_dir, tmp_path)
    good = tr.save(1)
    real = C.torch_save

    def full(obj, path):
        if path.name == "scheduler.pt":
            raise C.unwritable(path, OSError(errno.ENOSPC, "No space left on device"))
        real(obj, path)

    monkeypatch.setattr(C, "torch_save", full)
    with pytest.raises(OSError, match="No space left on device"):
        tr.save(2)
    root = tmp_path / "run" / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["step-000001"]
    assert (good / "trainer_state" / "state.json").is_file()

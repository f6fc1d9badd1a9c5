"""A checkpoint save stopped by Ctrl-C (KeyboardInterrupt, not an OSError) removes its half-written hidden folder as
a full disk's does (round 29j mutant: 'except BaseException' -> 'except OSError' in FlowGRPOTrainer.save survived)."""

import pytest
from test_train import _sgd_trainer


def test_a_checkpoint_save_stopped_by_ctrl_c_leaves_no_half_written_folder(sd3_dir, tmp_path, monkeypatch):
    from imgalign.trainers import checkpoint as C

    tr = _sgd_trainer(sd3_dir, tmp_path)
    real = C.torch_save

    def stopped(obj, path):
        if path.name == "scheduler.pt":
            raise KeyboardInterrupt
        real(obj, path)

    monkeypatch.setattr(C, "torch_save", stopped)
    with pytest.raises(KeyboardInterrupt):
        tr.save(1)
    assert list((tmp_path / "run" / "checkpoints").iterdir()) == []

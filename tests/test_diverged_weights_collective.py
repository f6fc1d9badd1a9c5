"""The save's check for NaN/inf weights looked at this process's parameters alone: with parameters sharded (FSDP) a
shard that diverged on one process made that process raise while the others went on into the save's collectives
and waited for it. The check is a collective: every process refuses the save when any holds such weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.test_badinput_r36m_weights import _trainer

torch.set_num_threads(1)


def test_weights_diverged_on_another_process_stop_this_ones_save(
    sd3_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    from imgalign.trainers import trainer as trainer_mod
    from imgalign.trainers.trainer import DivergedWeights

    tr = _trainer(sd3_dir, tmp_path)
    asked = []

    def another_process_holds_them(acc, flag: bool) -> bool:
        asked.append(flag)
        return True  # this process's weights are finite; another's are not

    monkeypatch.setattr(trainer_mod, "any_process", another_process_holds_them)
    with pytest.raises(DivergedWeights, match=r"hold NaN/inf values \(on another process\)"):
        tr.save(1)
    assert asked == [False]
    assert not (tmp_path / "run" / "checkpoints" / "step-000001").exists()

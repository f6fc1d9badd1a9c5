"""Checkpoint behaviour no earlier test pinned down (mutation round 30c): the advice after a failed write that the OS
gave no reason for, and the earlier checkpoints named for a damaged one that lies outside a run's checkpoints/."""

from __future__ import annotations

import errno
import json

from imgalign.trainers import checkpoint as C


def test_an_os_error_without_an_errno_is_advised_as_a_full_disk():
    """An OSError with no errno (a library's own "write failed") gives no reason that freeing space would not mend:
    the advice is the full disk's, as for torch's reasonless "unexpected pos", not the permissions one kept for an
    errno such as EACCES."""
    assert C.write_advice(OSError("write failed")) == (
        "is the disk full, or a file-size limit (ulimit -f) set?",
        "free space",
    )
    assert C.write_advice(OSError(errno.EACCES, "Permission denied"))[1] == "mend that"


def test_a_damaged_checkpoint_outside_a_checkpoints_folder_is_not_sent_to_another_folders_checkpoints(
    tmp_path,
):
    """A copy of a checkpoint (tmp/copies/step-000005) is no part of the run in tmp/checkpoints: its damage is
    reported with no earlier checkpoint to resume from, not with --resume of a checkpoint of that other folder."""
    other = tmp_path / "checkpoints" / "step-000002"
    (other / "trainer_state").mkdir(parents=True)
    (other / "trainer_state" / "state.json").write_text(json.dumps({"step": 2, "num_processes": 1}))
    copy = tmp_path / "copies" / "step-000005"
    (copy / "trainer_state").mkdir(parents=True)
    (copy / "trainer_state" / "state.json").write_text("{cut")
    msg = str(C._unreadable(copy / "trainer_state" / "state.json", ValueError("cut")))
    assert f"checkpoint {copy} is damaged. The run has no earlier checkpoint in {copy.parent}" in msg, msg
    assert str(other) not in msg

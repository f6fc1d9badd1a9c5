"""Checkpoint behaviour the earlier tests left unpinned (mutation round 20), on hand-made folders (no model loads)."""

from __future__ import annotations

from imgalign.trainers import checkpoint as C


def test_incomplete_after_no_checkpoint_lists_every_incomplete_step_folder_step_0_too(tmp_path):
    """incomplete_after(run, None), a run with no complete checkpoint: every step-N folder without state.json,
    step-000000 included (a resume that found no checkpoint names each one it passed over)."""
    for step in (0, 3):
        (tmp_path / "checkpoints" / C.checkpoint_name(step) / "trainer_state").mkdir(parents=True)
    want = [tmp_path / "checkpoints" / n for n in ("step-000000", "step-000003")]
    assert C.incomplete_after(tmp_path, None) == want

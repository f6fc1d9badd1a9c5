"""trainers/tree.py, mutation round 22: behaviour the round's surviving mutants showed untested."""

from __future__ import annotations

from imgalign.trainers.tree import backward_progressive_window


def test_the_progressive_window_grows_at_the_first_step_of_each_grow_every_period_not_one_early():
    """B²-DiffuRL: the window of `initial` steps is extended by `grow_by` at training steps grow_every,
    2·grow_every, ... (train_step // grow_every extensions). The step before an extension still trains the old
    window; a schedule counting from 1 (extending at step grow_every - 1) trained the wider window one step early."""
    assert backward_progressive_window(9, 10, initial=1, grow_every=10, grow_by=1) == [8]
    assert backward_progressive_window(10, 10, initial=1, grow_every=10, grow_by=1) == [7, 8]
    assert backward_progressive_window(19, 10, initial=1, grow_every=10, grow_by=1) == [7, 8]
    assert backward_progressive_window(2, 6, initial=2, grow_every=3, grow_by=1) == [3, 4]
    assert backward_progressive_window(3, 6, initial=2, grow_every=3, grow_by=1) == [2, 3, 4]

"""imgalign.pretrain.encoder_common, mutation round 28 (helper e): the training stream's seeds."""

from __future__ import annotations

from imgalign.pretrain import encoder_common as C


def test_the_training_stream_seeds_are_the_ones_the_shipped_encoders_were_trained_on() -> None:
    """The shipped CLIP and VLM encoders were trained on the pool and batches of these seeds: another formula (even
    one still apart from the evaluation stream) draws other batches, so rerunning a shipped recipe no longer
    reproduces the shipped weights and a checkpoint resumed across the change trains on other batches."""
    assert C.step_seed(0, 0) == 17
    assert C.step_seed(0, 1) == 17 + 9973
    assert C.step_seed(7, 123) == (7 * 1_000_003 + 123 * 9973 + 17) & 0x7FFFFFFF
    assert C.step_seed(2**31, 0) == (2**31 * 1_000_003 + 17) & 0x7FFFFFFF
    assert C.pool_seed(0) == 17
    assert C.pool_seed(7) == 7 * 1_000_003 + 17

"""Mutation round 25 (stop 62): the CLIP/VLM pretraining's shared pieces
(:mod:`imgalign.pretrain.encoder_common`)."""

from __future__ import annotations

import itertools

from imgalign.pretrain import encoder_common as C


def test_no_training_step_of_one_seed_replays_a_step_of_another_seed() -> None:
    """Each seed is its own training data stream: over a default CLIP run (2000 steps) no step seed of one seed is a
    step seed of another, seeds 2**16 apart included (a 16-bit step seed gave seeds 0 and 65536 the same batches)."""
    seeds = (0, 1, 12345, 1 << 16, (1 << 16) + 1, 1 << 20)
    streams = {s: {C.step_seed(s, step) for step in range(2000)} for s in seeds}
    assert all(len(v) == 2000 for v in streams.values())
    assert [(a, b) for a, b in itertools.combinations(seeds, 2) if streams[a] & streams[b]] == []

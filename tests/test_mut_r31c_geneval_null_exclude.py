"""rewards/geneval: a metadata row whose "exclude" is null (None) is a row with nothing excluded, as the judge reads
it, not a TypeError in the vocabulary check (round 31c survivor G2: `meta.get(side) or []` as
`meta.get(side, [])`)."""

from __future__ import annotations

from imgalign import shapes as W
from imgalign.rewards.geneval import GenEvalReward, check_shapes_vocabulary


def test_a_null_exclude_is_nothing_excluded() -> None:
    spec = W.counting(W.SHAPES[0], 2)
    row = dict(spec.to_metadata(), exclude=None)
    check_shapes_vocabulary(row)
    reward = GenEvalReward(mode="strict")
    reward.check_metadata([row])
    assert reward(W.render_tensor([spec], seed=0), [spec.prompt()], [row]).scores.tolist() == [1.0]

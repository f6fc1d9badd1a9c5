"""rewards/base.did_you_mean offers a name only when the given one is most likely a misspelling of it: a name half
alike is another word (round 31c survivor B12: the cutoff 0.75 lowered to 0.5 went unnoticed)."""

from __future__ import annotations

from imgalign.rewards.base import did_you_mean, unknown_reward


def test_a_name_only_half_alike_gets_no_suggestion() -> None:
    assert did_you_mean("size", ["seed"]) == ""  # half of their letters alike (ratio 0.5): another option
    assert "did you mean" not in unknown_reward("fidelity")  # 'fid' (ratio 0.55)
    assert "did you mean" not in unknown_reward("clipscore")  # 'clip' (ratio 0.62): another reward
    assert did_you_mean("geneval2", ["geneval", "clip"]) == " (did you mean 'geneval'?)"

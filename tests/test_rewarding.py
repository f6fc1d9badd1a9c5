"""The trainer's reward balancers and reward bookkeeping (trainers/rewarding.py): masking, std modes, clipping."""

import pytest
import torch

from imgalign.trainers.grpo import group_advantages
from imgalign.trainers.rewarding import (
    gdpo,
    group_norm_weighted,
    marble,
    metric_safe,
    per_reward_advantages,
    reward_means_by_tag,
    score_all,
    weighted_sum,
)

torch.set_num_threads(1)

# two rewards, two groups of four; reward 0 has a large outlier so the clip at 1 bites and the batch std differs
R = torch.tensor([[0.0, 1.0, 2.0, 9.0, 4.0, 0.0, 1.0, 3.0], [1.0, 0.0, 0.5, 2.0, 0.0, 3.0, 1.0, 1.0]])
GID = torch.arange(8) // 4
FIN = torch.ones(2, 8, dtype=torch.bool)


def test_weighted_sum_leaves_a_non_finite_sample_out_and_passes_std_mode_and_clip():
    """weighted_sum = GRPO advantages of the weighted raw sum, with the configured std_mode and adv_clip; a sample
    with a NaN in any reward takes no part (advantage 0, not valid) and the rest are those of the batch without it."""
    w = torch.tensor([1.0, 0.5])
    combined = (w[:, None] * R).sum(0)
    for std_mode, clip in (("group", 5.0), ("batch", 5.0), ("group", 1.0), ("batch", 0.5)):
        out = weighted_sum(R, w, GID, FIN, std_mode, clip)
        want = group_advantages(combined, GID, std_mode, clip)  # type: ignore[arg-type]
        torch.testing.assert_close(out.advantages, want.advantages)
    # the four settings differ from each other on this batch (else passing them through would not show)
    outs = [
        weighted_sum(R, w, GID, FIN, s, c).advantages
        for s, c in (("group", 5.0), ("batch", 5.0), ("group", 1.0))
    ]
    assert not torch.allclose(outs[0], outs[1]) and not torch.allclose(outs[0], outs[2])
    r = R.clone()
    r[1, 2] = float("nan")
    out = weighted_sum(r, w, GID, torch.isfinite(r), "batch", 5.0)
    keep = [0, 1, 3, 4, 5, 6, 7]
    alone = weighted_sum(R[:, keep], w, GID[keep], FIN[:, keep], "batch", 5.0)
    assert not out.valid[2] and out.advantages[2] == 0
    torch.testing.assert_close(out.advantages[keep], alone.advantages)


def test_marble_and_per_reward_advantages_pass_std_mode_and_clip():
    """Each reward's own GRPO advantage uses the configured std_mode and adv_clip (MARBLE's signal)."""
    w = torch.ones(2)
    for std_mode, clip in (("group", 5.0), ("batch", 5.0), ("group", 1.0)):
        want = torch.stack([group_advantages(R[k], GID, std_mode, clip).advantages for k in range(2)])  # type: ignore[arg-type]
        per, valid, _ = per_reward_advantages(R, GID, FIN, std_mode, clip)
        torch.testing.assert_close(per, want)
        out = marble(R, w, GID, FIN, std_mode, clip)
        assert out.per_reward is not None
        torch.testing.assert_close(out.per_reward, want)
        torch.testing.assert_close(out.advantages, want.mean(0))


def test_gdpo_drops_a_group_whose_every_sample_has_a_non_finite_reward():
    """A group without any finite sample is not valid, counts as tied, and leaves the others' advantages alone (it
    has no member to compare, not an error)."""
    r = R.clone()
    r[0, :4] = float("nan")
    out = gdpo(r, torch.ones(2), GID, torch.isfinite(r))
    assert out.valid.tolist() == [False] * 4 + [True] * 4
    assert out.zero_std_ratio == pytest.approx(1 / 2)
    alone = gdpo(R[:, 4:], torch.ones(2), GID[4:], FIN[:, 4:])
    torch.testing.assert_close(out.advantages[4:], alone.advantages)
    assert (out.advantages[:4] == 0).all() and (out.per_reward[:, :4] == 0).all()  # type: ignore[index]


def test_reward_means_by_tag_leaves_out_a_tag_without_a_finite_score():
    """A tag whose samples all have non-finite scores of a reward gets no entry for that reward (not a NaN mean)."""
    scores = torch.tensor([[1.0, float("nan"), 3.0], [0.5, 0.25, 1.0]])
    meta = [{"tag": "colors"}, {"tag": "counting"}, {"tag": "colors"}]
    m = reward_means_by_tag(scores, torch.isfinite(scores), ["a", "b"], meta)
    assert m == {
        "reward_by_tag/a/colors": 2.0,
        "reward_by_tag/b/colors": 0.75,
        "reward_by_tag/b/counting": 0.25,
    }


def test_score_all_names_at_most_three_prompts_in_its_warning(caplog):
    from imgalign.rewards.base import RewardOutput

    def all_nan(images, prompts, metadata):
        return RewardOutput(torch.full((5,), float("nan")))

    prompts = ["e", "d", "c", "b", "a"]
    with caplog.at_level("WARNING", logger="imgalign.trainers.rewarding"):
        score_all({"judge": all_nan}, torch.zeros(5, 3, 4, 4), prompts, [{}] * 5)
    assert "'judge' returned 5 non-finite score(s)" in caplog.text and "['a', 'b', 'c']" in caplog.text


def test_metric_safe_keeps_the_characters_trackers_take():
    """Letters, digits, _ . - : and space stay; anything else (= , / ') becomes _."""
    assert metric_safe("clip:prompt='a red-ish.ball',w=2") == "clip:prompt__a red-ish.ball__w_2"


def test_group_norm_weighted_gives_a_reward_that_ties_in_a_group_zero_there_and_passes_the_clip():
    """A reward that ties within a group normalises to 0 there (eps in the denominator; 0/0 was NaN), the other
    reward still drives that group; adv_clip clips the final advantages."""
    r = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0, 2.0, 4.0, 9.0], [0.0, 1.0, 2.0, 6.0, 1.0, 1.0, 0.0, 2.0]])
    out = group_norm_weighted(r, torch.ones(2), GID, FIN, "group", 5.0)
    assert out.per_reward is not None and (out.per_reward[0, :4] == 0).all()
    assert torch.isfinite(out.advantages).all() and out.valid.all()
    want = group_advantages(out.per_reward.sum(0), GID, "group", 5.0).advantages
    torch.testing.assert_close(out.advantages, want)
    clipped = group_norm_weighted(r, torch.ones(2), GID, FIN, "group", 1.0)
    assert clipped.advantages.abs().max() == 1.0 and out.advantages.abs().max() > 1.2
    torch.testing.assert_close(clipped.advantages, want.clamp(-1.0, 1.0))

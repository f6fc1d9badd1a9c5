"""The trainer's reward balancers and reward bookkeeping (trainers/rewarding.py): masking, std modes, clipping."""

import pytest
import torch

from imgalign.trainers.grpo import group_advantages
from imgalign.trainers.rewarding import (
    Balanced,
    build_rewards,
    check_balanced,
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


def test_check_balanced_refuses_advantages_or_valid_of_another_shape_or_dtype():
    """advantages must be float [N] and valid bool [N]: an [N, 1] column (same number of elements), integer
    advantages or a float valid mask are refused by name; a right one is returned as it is."""
    adv, valid = torch.zeros(4), torch.ones(4, dtype=torch.bool)
    good = Balanced(adv, valid, 0.0)
    assert check_balanced("b", good, 4) is good
    for bal, msg in (
        (
            Balanced(adv[:, None], valid, 0.0),
            r"returned advantages as torch.float32 \(4, 1\); it must be a float",
        ),
        (Balanced(adv.long(), valid, 0.0), r"returned advantages as torch.int64 \(4,\)"),
        (Balanced(adv, valid[:, None], 0.0), r"returned valid as torch.bool \(4, 1\); it must be a bool"),
        (Balanced(adv, valid.float(), 0.0), r"returned valid as torch.float32 \(4,\)"),
        (Balanced(adv, [True] * 4, 0.0), r"returned valid as list;"),
        (adv, r"returned a Tensor, not a Balanced"),
    ):
        with pytest.raises(ValueError, match=r"reward balancer 'b' " + msg):
            check_balanced("b", bal, 4)  # type: ignore[arg-type]


def test_score_all_gives_detached_float32_rows_of_one_score_per_image():
    """A reward returning float64 scores, a [B, 1] column, or scores that still carry autograd history gives a
    detached float32 row of B scores (the trainer's [K, B] layout, gathered over processes as float32)."""
    from imgalign.rewards.base import RewardOutput

    w = torch.ones((), requires_grad=True)

    def column(images, prompts, metadata):
        return RewardOutput(torch.arange(3, dtype=torch.float64)[:, None] * w)

    s = score_all({"col": column}, torch.zeros(3, 3, 4, 4), ["x", "y", "z"], [{}] * 3)
    assert s.shape == (1, 3) and s.dtype == torch.float32 and not s.requires_grad
    assert s.tolist() == [[0.0, 1.0, 2.0]]


def test_build_rewards_builds_each_reward_on_the_given_device(monkeypatch):
    import imgalign.rewards.base as base

    seen = []

    def fake_build(spec, device="cpu"):
        seen.append((spec, device))
        return type("R", (), {"name": spec})()

    monkeypatch.setattr(base, "build_reward", fake_build)
    assert list(build_rewards(["a", "b"], device="meta")) == ["a", "b"]
    assert seen == [("a", "meta"), ("b", "meta")]


def test_gdpo_per_reward_with_the_batch_std_keeps_a_tied_group_in_the_std():
    """gdpo's per-reward advantages use every finite sample for the batch std, a tied group included (as
    group_advantages' "batch" mode does), while the tied group itself is dropped from the advantages."""
    r = torch.tensor([[0.0, 1.0, 2.0, 3.0, 5.0, 5.0, 5.0, 5.0]])
    out = gdpo(r, torch.ones(1), GID, torch.ones(1, 8, dtype=torch.bool), "batch", 0.0)
    want = group_advantages(r[0], GID, "batch", None).advantages
    torch.testing.assert_close(out.per_reward[0], want, atol=1e-3, rtol=0)  # type: ignore[index]
    assert out.valid.tolist() == [True] * 4 + [False] * 4 and out.zero_std_ratio == 0.5


def test_marble_placeholder_advantages_are_the_weight_normalised_mean_of_the_per_reward_ones():
    """With weights [1, 3] the placeholder advantages are 1/4 of reward 0's plus 3/4 of reward 1's."""
    out = marble(R, torch.tensor([1.0, 3.0]), GID, FIN, "group", 5.0)
    per = torch.stack([group_advantages(R[k], GID, "group", 5.0).advantages for k in range(2)])
    torch.testing.assert_close(out.advantages, 0.25 * per[0] + 0.75 * per[1])


def test_reward_means_by_tag_leaves_out_samples_with_an_empty_tag():
    """A tag of "" is no tag: no ``reward_by_tag/<name>/`` entry (a metric name ending in a slash)."""
    scores = torch.tensor([[1.0, 2.0]])
    assert reward_means_by_tag(scores, torch.isfinite(scores), ["a"], [{"tag": ""}, {"tag": "colors"}]) == {
        "reward_by_tag/a/colors": 2.0
    }


def test_balancer_inputs_unmask_only_the_non_finite_scores_of_a_reward_of_weight_0():
    """Reward 0 (weight 1) is NaN on sample 1, reward 1 (weight 0) NaN or inf on samples 0 and 2: sample 1 stays masked,
    samples 0 and 2 are given as 0 and finite; every balancer then masks only sample 1, and reward 1's placeholder
    0s move no advantage (the result is reward 0's alone)."""
    from imgalign.trainers.rewarding import balancer_inputs, gdpo, reward_stats

    nan = float("nan")
    scores = torch.tensor([[1.0, nan, 3.0, 4.0, 6.0, 5.0], [nan, 2.0, float("inf"), 5.0, 1.0, 0.0]])
    finite = torch.isfinite(scores)
    w = torch.tensor([1.0, 0.0])
    s, f = balancer_inputs(scores, finite, w)
    assert f.tolist() == [[True, False, True, True, True, True], [True] * 6]
    assert s[1].tolist() == [0.0, 2.0, 0.0, 5.0, 1.0, 0.0] and s[0, 0] == 1.0 and s[0, 1].isnan()
    gid = torch.tensor([0, 0, 0, 1, 1, 1])
    for balancer in (group_norm_weighted, weighted_sum, gdpo):
        both = balancer(s, w, gid, f, "group", None)
        alone = balancer(s[:1], w[:1], gid, f[:1], "group", None)
        assert both.valid.tolist() == [True, False, True, True, True, True]
        # (group_norm_weighted normalises a sum of several rewards once more: equal up to its eps)
        assert torch.allclose(both.advantages, alone.advantages, atol=1e-3)
    # weights > 0 change nothing
    s1, f1 = balancer_inputs(scores, finite, torch.tensor([1.0, 2.0]))
    assert torch.equal(f1, finite)
    torch.testing.assert_close(s1, scores, equal_nan=True, rtol=0, atol=0)
    stats = reward_stats(scores, finite, ["a", "b"], w)
    assert (stats["reward/a/nonfinite"], stats["reward/a/masked"]) == (1.0, 1.0)
    assert (stats["reward/b/nonfinite"], stats["reward/b/masked"]) == (2.0, 0.0)
    assert (
        reward_stats(scores, finite, ["a", "b"])["reward/b/masked"] == 2.0
    )  # no weights: every reward masks

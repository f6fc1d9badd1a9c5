"""Round 20 (stop 57) tests of trainers/rewarding.py: how the trainer's reward rows reach the balancers."""

import pytest
import torch

from imgalign.trainers.rewarding import gdpo

torch.set_num_threads(1)


@pytest.mark.parametrize("std_mode", ["group", "global"])
def test_gdpo_with_a_logged_only_reward_trains_as_without_it(std_mode: str) -> None:
    """Group 0 ties on the reward of weight 1 while the reward of weight 0 (logged only) varies there: the group
    carries no signal and is dropped, as without the logged-only reward. It was kept valid with advantage 0, which
    entered the batch statistics and scaled group 1's advantages from 1.22 to 1.73 (zero_std_ratio 0, not 0.5)."""
    scores = torch.tensor([[1.0, 1.0, 1.0, 0.0, 1.0, 2.0], [0.0, 1.0, 2.0, 3.0, 3.0, 1.0]])
    gid = torch.tensor([0, 0, 0, 1, 1, 1])
    finite = torch.ones(2, 6, dtype=torch.bool)
    both = gdpo(scores, torch.tensor([1.0, 0.0]), gid, finite, std_mode, None)
    alone = gdpo(scores[:1], torch.tensor([1.0]), gid, finite[:1], std_mode, None)
    assert alone.valid.tolist() == [False, False, False, True, True, True] and alone.zero_std_ratio == 0.5
    assert both.valid.tolist() == alone.valid.tolist() and both.zero_std_ratio == alone.zero_std_ratio
    torch.testing.assert_close(both.advantages, alone.advantages)
    # a reward of weight > 0 that varies there keeps the group
    kept = gdpo(scores, torch.tensor([1.0, 0.5]), gid, finite, std_mode, None)
    assert kept.valid.all() and kept.zero_std_ratio == 0.0


def test_reward_stats_read_only_the_finite_scores() -> None:
    """mean and population std over the finite scores (1 and 3: 2 and 1), not NaN from the masked one."""
    from imgalign.trainers.rewarding import reward_stats

    scores = torch.tensor([[1.0, float("nan"), 3.0]])
    stats = reward_stats(scores, torch.isfinite(scores), ["r"])
    assert (stats["reward/r/mean"], stats["reward/r/std"], stats["reward/r/nonfinite"]) == (2.0, 1.0, 1.0)


def _nan_on(rows: list[int], n: int):
    from imgalign.rewards.base import RewardOutput

    def fn(images, prompts, metadata):
        s = torch.ones(n)
        s[rows] = float("nan")
        return RewardOutput(s)

    return fn


def test_score_all_warns_only_of_the_non_finite_scores_of_images_not_known_bad(caplog) -> None:
    """Row 0 is a known-bad (diverged) image, already warned about: only row 2's NaN is counted and named; a batch
    whose only NaN score is on a known-bad row gives no warning."""
    from imgalign.trainers.rewarding import score_all

    known = torch.tensor([True, False, False])
    with caplog.at_level("WARNING", logger="imgalign.trainers.rewarding"):
        s = score_all(
            {"judge": _nan_on([0, 2], 3)}, torch.zeros(3, 3, 2, 2), ["p0", "p1", "p2"], [{}] * 3, known
        )
    assert s.shape == (1, 3) and s[0, 0].isnan() and s[0, 2].isnan()
    assert "'judge' returned 1 non-finite score(s)" in caplog.text and "['p2']" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="imgalign.trainers.rewarding"):
        score_all({"judge": _nan_on([0], 3)}, torch.zeros(3, 3, 2, 2), ["p0", "p1", "p2"], [{}] * 3, known)
    assert caplog.text == ""


def test_score_all_says_a_logged_only_rewards_non_finite_scores_mask_no_sample(caplog) -> None:
    """A reward of weight 0 (in logged_only): its warning says no sample is masked; another reward's says they are."""
    from imgalign.trainers.rewarding import score_all

    rewards = {"judge": _nan_on([1], 2), "side": _nan_on([0], 2)}
    with caplog.at_level("WARNING", logger="imgalign.trainers.rewarding"):
        score_all(rewards, torch.zeros(2, 3, 2, 2), ["a", "b"], [{}] * 2, logged_only=["side"])
    judge, side = (r.getMessage() for r in caplog.records)
    assert "'judge'" in judge and "masked out of the advantages" in judge and "logged only" not in judge
    assert "'side'" in side and "weight 0 (logged only), so no sample is masked" in side


def test_reward_means_by_tag_leaves_out_a_sample_without_metadata() -> None:
    """A sample whose metadata row is None (a prompt without GenEval metadata) has no tag: left out, no error."""
    from imgalign.trainers.rewarding import reward_means_by_tag

    scores = torch.tensor([[1.0, 5.0, 3.0]])
    m = reward_means_by_tag(
        scores, torch.isfinite(scores), ["r"], [{"tag": "colors"}, None, {"tag": "colors"}]
    )
    assert m == {"reward_by_tag/r/colors": 2.0}


def test_gdpo_drops_a_group_whose_finite_members_tie_beside_a_non_finite_one() -> None:
    """Group 0: two finite scores that tie and a NaN one (masked): no signal, dropped, as a group that ties. The NaN
    member read into the tie check made max and min NaN, so the group was kept with advantages 0."""
    nan = float("nan")
    scores = torch.tensor([[1.0, 1.0, nan, 0.0, 1.0, 2.0]])
    res = gdpo(
        scores, torch.tensor([1.0]), torch.tensor([0, 0, 0, 1, 1, 1]), torch.isfinite(scores), "group", None
    )
    assert res.valid.tolist() == [False, False, False, True, True, True] and res.zero_std_ratio == 0.5


def test_a_rewards_metric_name_is_its_own_name_unless_another_reward_shares_it() -> None:
    """geneval:mode=strict alone logs as reward/geneval/*; beside plain geneval, by its tracker-safe key."""
    from imgalign.trainers.rewarding import metric_names

    assert metric_names(["geneval:mode=strict"], ["geneval"]) == ["geneval"]
    assert metric_names(["geneval", "geneval:mode=strict"], ["geneval", "geneval"]) == [
        "geneval",
        "geneval:mode_strict",
    ]
    assert metric_names(["geneval:mode=strict"], [None]) == ["geneval:mode_strict"]  # no name: its key
    # two rewards sharing a name go by their keys; a third with its own name keeps it
    assert metric_names(
        ["geneval", "geneval:mode=strict", "clip:batch_size=3"], ["geneval", "geneval", "clip"]
    ) == ["geneval", "geneval:mode_strict", "clip"]


def test_a_unique_name_equal_to_another_rewards_key_puts_every_reward_by_its_key() -> None:
    """A user reward named 'geneval:mode_strict' beside geneval:mode=strict and geneval (both named geneval, so by
    their keys): two metrics would share a name, so every reward goes by its key."""
    from imgalign.trainers.rewarding import metric_names

    specs = ["clip:batch_size=3", "geneval:mode=strict", "geneval"]
    assert metric_names(specs, ["geneval:mode_strict", "geneval", "geneval"]) == [
        "clip:batch_size_3",
        "geneval:mode_strict",
        "geneval",
    ]


def test_keys_made_equal_by_metric_safe_are_numbered_from_2() -> None:
    """Two options differing only in characters a tracker refuses (b/c, b'c) give one safe name: the second is _2."""
    from imgalign.trainers.rewarding import metric_names

    assert metric_names(["x.y:f:a=b/c", "x.y:f:a=b'c"], [None, None]) == ["x.y:f:a_b_c", "x.y:f:a_b_c_2"]


def test_build_rewards_refuses_the_same_reward_twice_before_building_either() -> None:
    from imgalign.trainers.rewarding import build_rewards

    with pytest.raises(ValueError, match=r"'geneval' and 'geneval: mode=partial' are the same reward"):
        build_rewards(["geneval", "geneval: mode=partial"])


def test_a_user_rewards_own_name_is_made_tracker_safe_too() -> None:
    """A Reward subclass named 'judge/v2=big' logged reward/judge/v2=big/mean: a metric nested one level deeper, with
    an '=' MLflow refuses. Its name goes through metric_safe as a key does."""
    from imgalign.trainers.rewarding import metric_names

    assert metric_names(["x.y:Judge"], ["judge/v2=big"]) == ["judge_v2_big"]
    assert metric_names(["x.y:Judge", "x.z:Judge"], ["judge/v2", "judge/v2"]) == ["x.y:Judge", "x.z:Judge"]

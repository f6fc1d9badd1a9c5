"""Reward masking and group_norm_weighted behaviour no earlier test pinned down (mutation round 22): an infinite score
is warned about as a NaN is, and each reward is normalised within its group over the finite samples only, as GRPO
normalises (same eps), so neither its scale nor a masked sample moves the others' advantages."""

import pytest
import torch

from imgalign.trainers.grpo import group_advantages
from imgalign.trainers.rewarding import group_norm_weighted, score_all

torch.set_num_threads(1)

GID = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])


class _Scores:
    def __init__(self, scores: torch.Tensor) -> None:
        self.scores = scores


def test_score_all_warns_of_infinite_scores_as_of_nan_ones(caplog) -> None:
    """+inf and -inf are non-finite scores too: counted and named in the warning (their samples are masked)."""
    judge = lambda images, prompts, metadata: _Scores(torch.tensor([1.0, float("inf"), -float("inf")]))  # noqa: E731
    with caplog.at_level("WARNING", logger="imgalign.trainers.rewarding"):
        s = score_all({"judge": judge}, torch.zeros(3, 3, 2, 2), ["a", "b", "c"], [{}] * 3)
    assert s[0, 0] == 1.0 and s[0, 1:].isinf().all()
    assert "'judge' returned 2 non-finite score(s)" in caplog.text and "['b', 'c']" in caplog.text


@pytest.mark.parametrize("spread", [1e-4, 1.0, 100.0])
def test_group_norm_weighted_normalises_each_reward_as_grpo_does_within_its_groups(spread: float) -> None:
    """per_reward[k] is reward k's group-normalised score, (r - mean) / (std + 1e-4) as group_advantages computes it
    (unclipped), whatever the reward's scale: a reward with a tiny spread is not blown up to unit scale, and one with
    a large spread does not dominate the weighted sum."""
    base = torch.tensor([0.0, 1.0, 3.0, 2.0, 5.0, 1.0, 0.0, 2.0])
    r = torch.stack([base * spread, torch.tensor([1.0, 0.0, 2.0, 0.0, 0.0, 1.0, 3.0, 1.0])])
    out = group_norm_weighted(r, torch.ones(2), GID, torch.ones(2, 8, dtype=torch.bool), "group", None)
    assert out.per_reward is not None
    for k in range(2):
        torch.testing.assert_close(out.per_reward[k], group_advantages(r[k], GID, "group", None).advantages)


def test_group_norm_weighted_leaves_a_masked_sample_out_of_every_rewards_group_statistics() -> None:
    """Sample 3's first reward is NaN: the sample is masked (advantage 0, not valid) and the other members of its
    group are normalised, for every reward, as if it were not there."""
    r = torch.tensor(
        [[0.0, 1.0, 3.0, float("nan"), 5.0, 1.0, 0.0, 2.0], [1.0, 0.0, 2.0, 9.0, 0.0, 1.0, 3.0, 1.0]]
    )
    finite = torch.isfinite(r)
    out = group_norm_weighted(r, torch.ones(2), GID, finite, "group", None)
    assert out.per_reward is not None and not out.valid[3] and out.advantages[3] == 0
    keep = torch.tensor([0, 1, 2, 4, 5, 6, 7])
    alone = group_norm_weighted(r[:, keep], torch.ones(2), GID[keep], finite[:, keep], "group", None)
    assert alone.per_reward is not None
    torch.testing.assert_close(out.per_reward[:, keep], alone.per_reward)
    torch.testing.assert_close(out.advantages[keep], alone.advantages)


def test_group_norm_weighted_with_one_reward_is_its_plain_grpo_advantage_also_for_a_small_spread() -> None:
    """With one reward group_norm_weighted equals GRPO's advantages of that reward, not a second normalisation of
    its normalised scores (which differ where the spread is near eps: 0.5 against 1.0 here)."""
    r = torch.tensor([[0.0, 1e-4, 0.0, 1e-4, 1.0, 2.0, 3.0, 4.0]])
    out = group_norm_weighted(r, torch.ones(1), GID, torch.ones(1, 8, dtype=torch.bool), "group", 5.0)
    want = group_advantages(r[0], GID, "group", 5.0)
    torch.testing.assert_close(out.advantages, want.advantages)
    assert out.advantages[:4].abs().max() < 0.6


# two rewards, two groups of four; reward 0 has a large outlier so the clip at 1 bites and the batch std differs
R = torch.tensor([[0.0, 1.0, 2.0, 9.0, 4.0, 0.0, 1.0, 3.0], [1.0, 0.0, 0.5, 2.0, 0.0, 3.0, 1.0, 1.0]])
FIN = torch.ones(2, 8, dtype=torch.bool)


def test_gdpo_passes_std_mode_and_adv_clip() -> None:
    """gdpo normalises with the configured std (group: each group's std; batch: the batch's) and clips to
    adv_clip, as GDPO's reference function does with the same arguments."""
    from imgalign.trainers.balance import gdpo_advantages, group_normalize
    from imgalign.trainers.rewarding import gdpo

    results = {}
    for std_mode, std, clip in (("group", "group", 5.0), ("batch", "global", 5.0), ("group", "group", 1.0)):
        out = gdpo(R, torch.ones(2), GID, FIN, std_mode, clip)
        assert out.per_reward is not None and out.valid.all()
        torch.testing.assert_close(out.per_reward, group_normalize(R.T, GID, std=std).T)  # type: ignore[arg-type]
        torch.testing.assert_close(out.advantages, gdpo_advantages(R.T, GID, [1.0, 1.0], std=std, clip=clip))  # type: ignore[arg-type]
        results[std_mode, clip] = out.advantages
    assert not torch.allclose(results["group", 5.0], results["batch", 5.0])
    assert results["group", 1.0].abs().max() == 1.0 and results["group", 5.0].abs().max() > 1.2


def test_gdpo_counts_a_group_with_one_masked_member_as_not_tied() -> None:
    """A NaN on one sample masks that sample only: its group's other members still vary, so the group trains and
    zero_std_ratio stays 0."""
    from imgalign.trainers.rewarding import gdpo

    r = R.clone()
    r[0, 1] = float("nan")
    out = gdpo(r, torch.ones(2), GID, torch.isfinite(r))
    assert out.valid.tolist() == [True, False] + [True] * 6 and out.zero_std_ratio == 0.0


def test_per_reward_advantages_mark_the_finite_samples_of_varying_groups_valid_and_mask_across_rewards() -> (
    None
):
    """Every finite sample of a group in which some reward varies is valid (MARBLE trains on them); a sample with
    one non-finite reward is left out of every reward's group statistics, as in the other balancers."""
    from imgalign.trainers.rewarding import marble, per_reward_advantages

    per, valid, tied = per_reward_advantages(R, GID, FIN)
    assert valid.all() and tied == 0.0
    assert marble(R, torch.ones(2), GID, FIN).valid.all()
    r = R.clone()
    r[0, 3] = float("nan")
    per, valid, _ = per_reward_advantages(r, GID, torch.isfinite(r), "group", None)
    assert valid.tolist() == [True, True, True, False] + [True] * 4 and (per[:, 3] == 0).all()
    keep = torch.tensor([0, 1, 2, 4, 5, 6, 7])
    torch.testing.assert_close(
        per[1, keep], group_advantages(R[1, keep], GID[keep], "group", None).advantages
    )

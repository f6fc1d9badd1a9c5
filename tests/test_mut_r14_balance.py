"""Multi-reward balancing (mutation round 14): behaviour of trainers/balance.py that the other balance tests left
open."""

import pytest
import torch

from imgalign.trainers.balance import (
    BalanceConfig,
    RewardBalancing,
    group_normalize,
    min_norm_2,
    min_norm_simplex,
    param_gram,
    weighted_sum_advantages,
    zero_std_ratio,
)

torch.set_num_threads(1)


def test_balance_config_refuses_a_negative_marble_ema():
    """marble_ema must lie in [0, 1): a negative EMA weight is refused like 1.0 is."""
    with pytest.raises(ValueError, match=r"marble_ema must be in \[0, 1\) \(got -0.1\)"):
        BalanceConfig(marble_ema=-0.1).validate()


def test_zero_std_ratio_of_an_empty_batch_is_zero():
    """No samples, no groups: a tied share of 0, not a division by zero groups."""
    assert zero_std_ratio(torch.zeros(0), torch.zeros(0, dtype=torch.long)) == 0.0


def test_weighted_sum_advantages_clip_after_the_group_normalisation():
    """One group of four, one reward [0, 0, 0, 3]: [-1/√3 x3, √3]; clip 1 cuts the last to 1, clip 0 keeps √3."""
    rewards, groups = torch.tensor([[0.0], [0.0], [0.0], [3.0]]), torch.zeros(4, dtype=torch.long)
    low = -(3**-0.5)
    torch.testing.assert_close(
        weighted_sum_advantages(rewards, groups, eps=0.0, clip=1.0), torch.tensor([low] * 3 + [1.0])
    )
    torch.testing.assert_close(
        weighted_sum_advantages(rewards, groups, eps=0.0, clip=0.0), torch.tensor([low] * 3 + [3**0.5])
    )


def test_min_norm_2_puts_all_weight_on_the_shorter_gradient_either_way_round():
    """g2 = g1/2 (G = [[4, 2], [2, 1]]): the unclipped alpha_1 = (1 - 2)/1 = -1 is clipped to 0, alpha = [0, 1]
    (the mirror case of [[1, 2], [2, 4]] -> [1, 0])."""
    torch.testing.assert_close(min_norm_2(torch.tensor([[4.0, 2.0], [2.0, 1.0]])), torch.tensor([0.0, 1.0]))


def test_min_norm_simplex_of_two_equal_gradients_is_the_midpoint():
    """K = 2 goes to the closed form: equal gradients (every alpha optimal) give [1/2, 1/2], not a vertex."""
    torch.testing.assert_close(
        min_norm_simplex(torch.ones(2, 2, dtype=torch.float64)), torch.tensor([0.5, 0.5], dtype=torch.float64)
    )


@pytest.mark.parametrize("solver", ["auto", "projected_gradient"])
def test_min_norm_simplex_solves_the_symmetric_part_of_the_gram(solver):
    """alpha^T G alpha only sees G's symmetric part: G = diag(1, 4, 9) plus an antisymmetric part (float rounding
    can leave G_kl != G_lk) has the optimum of diag(1, 4, 9), alpha ~ 1/G_kk = [36, 9, 4]/49."""
    gram = torch.diag(torch.tensor([1.0, 4.0, 9.0], dtype=torch.float64))
    gram[0, 1], gram[1, 0], gram[1, 2], gram[2, 1] = 1.0, -1.0, 2.0, -2.0
    want = torch.tensor([36.0, 9.0, 4.0], dtype=torch.float64) / 49
    torch.testing.assert_close(min_norm_simplex(gram, solver), want, atol=1e-9, rtol=0)


def test_param_gram_refuses_a_list_without_trainable_parameters():
    frozen = torch.tensor([1.0, 2.0])
    with pytest.raises(ValueError, match="no trainable parameters"):
        param_gram([frozen.sum()], [frozen])


@pytest.mark.parametrize("space", ["output", "params"])
def test_reward_balancing_cosines_use_the_reduced_update_gram(space):
    """end_update(reduce) sums the update's diagnostics over processes before the cosines; here the other process
    turns reward b against the update. Local rows [g_a, g_b, d] = [e1, e2, e1] (cosines 1 and 0). Output space:
    the other process's Gram of [0, -e, e] is added -> [[1, 0, 1], [0, 2, -1], [1, -1, 2]]: cosines 1/√2, -1/2.
    Params space: the other process's d = -2 e2 is added to the gradients -> d = e1 - 2 e2: cosines 1/√5, -2/√5."""
    rb = RewardBalancing(["a", "b"], marble=False, diagnose=True, space=space)
    rb.start_update()
    assert rb._acc is not None
    rb._acc.add(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]))
    if space == "output":
        other = torch.tensor([[0.0, 0.0, 0.0], [0.0, 1.0, -1.0], [0.0, -1.0, 1.0]], dtype=torch.float64)
        rb.end_update(lambda g: g + other)
        want = (2**-0.5, -0.5)
    else:
        rb.end_update(lambda f: f + torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, -2.0]]))
        want = (5**-0.5, -2 * 5**-0.5)
    m = rb.step_metrics()
    assert (m["balance/grad_cos/a"], m["balance/grad_cos/b"]) == pytest.approx(want)
    assert m["balance/neg_cos_share"] == 1.0


def _head(x, z, weight):
    """A LossHead with v = x W^T and policy loss mean_i(-s_i <v_i, z_i>) (GRPO-like: signal = advantage)."""
    from imgalign.trainers.objectives import LossHead

    v = x @ weight.T
    return LossHead(v, lambda a: a.float(), lambda s: ((-s * (v * z).sum(1)).mean(), {}), torch.zeros(()), {})


def test_reward_balancing_step_metrics_use_the_prefix_and_restart_the_balance_time():
    """step_metrics(prefix) names every balance metric under the prefix (MARBLE's alpha too), and the time spent
    balancing (perf/sec_balance) is per step: a step without balancing work logs 0 after one that had some."""
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(5, 6))
    per = torch.randn(4, 2)
    rb = RewardBalancing(["a", "b"], marble=True, diagnose=True)
    rb.start_update()
    rb.micro_loss(_head(torch.randn(4, 6), torch.randn(4, 5), weight), per, per.sum(1), [weight])
    rb.end_update()
    m = rb.step_metrics(prefix="bal")
    assert m["perf/sec_balance"] > 0
    assert {"bal/alpha/a", "bal/alpha_star/b", "bal/coef/a", "bal/grad_cos/b", "bal/neg_cos_share"} <= set(m)
    assert not [k for k in m if k.startswith("balance/")]
    assert rb.step_metrics(prefix="bal")["perf/sec_balance"] == 0.0


def test_group_normalize_of_an_empty_batch_is_empty():
    """No samples (every row of a micro-batch masked out): empty advantages of the input's shape, as the
    function's n_groups guard intends (the reshape to [B, -1] raised on 0 elements before it got there)."""
    empty = torch.zeros(0, dtype=torch.long)
    assert group_normalize(torch.zeros(0), empty).shape == (0,)
    assert group_normalize(torch.zeros(0, 3), empty).shape == (0, 3)


def test_cosines_with_update_stay_within_minus_one_and_one_on_a_rounded_gram():
    """A closed-form Gram (nft_output_gram) can round a zero gradient's diagonal to 0 and leave a cross term of
    1e-16: the cosine was 1e-16 / 1e-30 = 1e14; it is clamped to the range a cosine has."""
    from imgalign.trainers.balance import cosines_with_update

    g = torch.tensor([[0.0, 0.0, 1e-16], [0.0, 0.0, -1e-16], [1e-16, -1e-16, 0.0]], dtype=torch.float64)
    cos = cosines_with_update(g)
    assert cos.tolist() == [1.0, -1.0]
    exact = torch.tensor([[4.0, 2.0], [2.0, 1.0]], dtype=torch.float64)  # d = g / 2: cos 1
    assert cosines_with_update(exact).tolist() == pytest.approx([1.0])

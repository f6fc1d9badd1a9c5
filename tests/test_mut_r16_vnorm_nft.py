"""Mutation round 16: the velocity-norm hinge (trainers/vnorm.py) and DiffusionNFT (trainers/nft.py) against
hand-computed values, for behaviour the other tests left unchecked."""

from __future__ import annotations

import pytest
import torch
from test_vnorm import _LineAdapter as _Line

from imgalign.trainers.nft import (
    EmaParams,
    NFTConfig,
    nft_loss,
    nft_loss_terms,
    sample_nft_times,
)
from imgalign.trainers.vnorm import (
    InflationMeter,
    bucket_means,
    inflation_along_ode,
    norm_ratio,
    velocity_norm_penalty,
    velocity_norms,
)

torch.set_num_threads(1)


# --- vnorm ------------------------------------------------------------------------------------------------------


def test_the_norm_is_the_euclidean_norm_over_all_latent_dimensions():
    """||v|| is the L2 norm over every latent dimension: v = [4, 4] against v_ref = [0, 5] is a ratio of
    sqrt(32)/5 (an L1 or max norm gives 8/5 or 4/5); a [B, C, H, W] velocity is flattened per sample."""
    v_ref = torch.tensor([[0.0, 5.0]])
    v = torch.tensor([[4.0, 4.0]])
    rho = 32**0.5 / 5
    assert norm_ratio(v, v_ref).item() == pytest.approx(rho, rel=1e-6)
    assert velocity_norm_penalty(v, v_ref, "linear").item() == pytest.approx(rho - 1, rel=1e-5)
    assert velocity_norm_penalty(v, v_ref, "squared").item() == pytest.approx((rho - 1) ** 2, rel=1e-5)
    x = torch.arange(24.0).reshape(2, 3, 2, 2)
    assert torch.allclose(
        velocity_norms(x), torch.stack([x[0].pow(2).sum().sqrt(), x[1].pow(2).sum().sqrt()])
    )


def test_low_precision_velocities_are_measured_in_float32():
    """bf16 velocities: the norms are float32 sums of the (bf16-exact) values, so an inflation of 1/128 reads as
    such; norms rounded to bf16 (spacing 1/128 at 1.7) read 1.7421875/1.734375, a third less."""
    v_ref = torch.ones(1, 3, dtype=torch.bfloat16)  # norm sqrt(3)
    v = v_ref * (1 + 1 / 128)  # exact in bf16
    assert velocity_norms(v).dtype == torch.float32
    assert velocity_norm_penalty(v, v_ref).item() == pytest.approx(1 / 128, rel=1e-4)


def test_a_tiny_but_nonzero_reference_norm_gives_the_plain_ratio():
    """eps guards only a zero reference norm: norms of 1e-8 and 5e-9 (the late steps of a well-fitted model can be
    that small) are a ratio of 2, not one shrunk toward 0 by a floor on the denominator."""
    v_ref = torch.tensor([[3e-9, 4e-9]])
    v = 2 * v_ref
    assert norm_ratio(v, v_ref).item() == pytest.approx(2.0, rel=1e-5)


def test_velocities_of_other_shapes_are_refused_even_with_the_same_batch():
    """[2, 3] against [2, 4] has a norm per sample on both sides, but they are not the same step's velocities."""
    with pytest.raises(ValueError, match=r"v_theta \(2, 3\) and v_ref \(2, 4\) must match"):
        norm_ratio(torch.ones(2, 3), torch.ones(2, 4))


def test_meter_reset_forgets_the_sums_too():
    """After reset() the means are those of the batches that follow only (reset cleared the counts but a stale sum
    would read ratio 2 + 1 over one sample)."""
    m = InflationMeter()
    ref = torch.ones(1, 4)
    m.update(2 * ref, ref, step_index=0, num_steps=3)
    m.reset()
    m.update(ref, ref, step_index=0, num_steps=3)
    assert m.compute() == pytest.approx({"vnorm/norm_ratio/early": 1.0, "vnorm/norm_ratio/all": 1.0})


def test_meter_and_bucket_means_refuse_more_labels_than_samples():
    """One sigma (or bucket name) per sample: extra ones were silently dropped by zip (or broke a mask)."""
    with pytest.raises(ValueError, match="one entry per sample"):
        InflationMeter().update(torch.ones(3, 2), torch.ones(3, 2), sigma=torch.tensor([0.9, 0.5, 0.1, 0.1]))
    with pytest.raises(ValueError, match="3 bucket names for 2 ratios"):
        bucket_means(torch.ones(2), ["early", "middle", "late"])


class _LineAdapter(_Line):
    """test_vnorm's 1-number 'latent' (policy v(x) = 2x, reference x + 0.5) in float64, on any schedule."""

    def sigmas(self, num_steps):
        return torch.linspace(1.0, 0.0, num_steps + 1, dtype=torch.float64)

    def init_noise(self, gens):
        return torch.ones(len(gens), 1, dtype=torch.float64)


def test_inflation_along_ode_puts_each_of_three_steps_in_its_own_third():
    """3 steps: x = 1 (early, ratio 2/1.5 = 4/3), x = 1 - 2/3 = 1/3 (middle, (2/3)/(5/6) = 0.8),
    x = 1/3 - 2/9 = 1/9 (late, (2/9)/(11/18) = 4/11): each step is bucketed by its index among 3."""
    out = inflation_along_ode(_LineAdapter(), lambda x: 2 * x, ["a"], [0], num_steps=3, guidance_scale=1.0)
    assert out == pytest.approx(
        {
            "eval/vnorm/norm_ratio/early": 4 / 3,
            "eval/vnorm/norm_ratio/middle": 0.8,
            "eval/vnorm/norm_ratio/late": 4 / 11,
            "eval/vnorm/norm_ratio/all": (4 / 3 + 0.8 + 4 / 11) / 3,
        }
    )


def test_eval_inflation_samples_like_the_suite_but_with_its_own_seeds(monkeypatch):
    """eval_inflation hands the evaluation's step count and the guidance scale it is given to the ODE, and its
    seeds are none of the suite's image seeds (_mix(seed, prompt i, image j)): the inflation is measured on other
    noise than the images scored."""
    import imgalign.trainers.vnorm as V
    from imgalign.trainers.config import EvalConfig
    from imgalign.trainers.prompting import _mix

    seen = {}
    monkeypatch.setattr(
        V, "inflation_along_ode", lambda ad, m, prompts, seeds, *a: seen.update(p=prompts, s=seeds, a=a)
    )
    cfg = EvalConfig(suite="shapes", prompts_per_task=2, vnorm_images=3, num_steps=7, images_per_prompt=2)
    V.eval_inflation(None, None, cfg, 4.5, [])
    assert seen["a"] == (7, 4.5)
    suite = {_mix(cfg.seed, i, j) for i in range(10) for j in range(cfg.images_per_prompt)}
    assert len(set(seen["s"])) == 3 and not set(seen["s"]) & suite


# --- nft --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        {"t_min": -0.1},
        {"t_max": 1.5},
        {"t_min": 0.0, "t_max": 1.0 + 1e-6},
    ],
    ids=["tmin_neg", "tmax_big", "tmax_just_above_1"],
)
def test_config_keeps_t_inside_zero_one(kw):
    """t is a noise level in [0, 1]: x_t = (1 - t)·x0 + t·eps with t < 0 or t > 1 extrapolates past the data or the
    noise."""
    with pytest.raises(ValueError, match="0 <= t_min < t_max <= 1"):
        NFTConfig(**kw).validate()


@pytest.mark.parametrize("kw", [{"ema_decay_max": -0.5}, {"ema_decay_ramp": -0.5}], ids=["max", "ramp"])
def test_config_refuses_a_negative_ema_decay(kw):
    """A negative decay bound or ramp gives a negative decay, which EmaParams.update refuses at the first update."""
    with pytest.raises(
        ValueError, match=r"ema_decay_max must be in \[0, 1\) and objective.nft.ema_decay_ramp >= 0"
    ):
        NFTConfig(**kw).validate()


def test_nft_times_are_shuffled_strata_in_float32():
    """Stratified t holds one draw per stratum of [t_min, t_max], in shuffled order (sample i does not always get
    the lowest noise level), as float32."""
    t = sample_nft_times(16, 0.0, 1.0, generator=torch.Generator().manual_seed(0))
    assert t.dtype == torch.float32 and t.shape == (16,)
    assert sorted((t * 16).floor().long().tolist()) == list(range(16))
    assert not torch.equal(t, t.sort().values)


def test_nft_loss_terms_refuse_a_v_theta_of_another_shape_than_x0():
    """v_theta and v_old agree but x0 (and x_t) have other dimensions: refused, not broadcast."""
    v = torch.zeros(2, 3)
    x0 = torch.zeros(2, 1)
    with pytest.raises(ValueError, match="must all have the same shape"):
        nft_loss_terms(v, v, x0, x0, torch.tensor([0.5, 0.5]), 1.0)


def test_nft_loss_terms_refuse_a_t_that_is_not_one_per_sample():
    """t [B, 1] (one per sample but not [B]) is refused as t of the wrong length is."""
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="t must have shape"):
        nft_loss_terms(x, x, x, x, torch.full((2, 1), 0.5), 1.0)


def test_nft_loss_terms_keep_float64():
    """float64 inputs are computed (and returned) in float64, not rounded to float32."""
    x0 = torch.tensor([[1.0, -1.0]], dtype=torch.float64)
    v = torch.tensor([[-1.0, 2.0]], dtype=torch.float64)
    lp, lm = nft_loss_terms(v, v, x0, x0, torch.tensor([0.5]), 1.0)
    assert lp.dtype == torch.float64 and lm.dtype == torch.float64


def test_nft_loss_of_a_small_error_is_its_plain_adaptive_ratio():
    """The adaptive weight's eps only guards a zero error: an error of 1e-3 per dimension (v_theta = v_old, so
    err+ = err- = x_t - t·v - x0) gives L = mean(err^2)/mean|err| = 1e-3 exactly, not mean(err^2)/eps."""
    x0 = torch.zeros(1, 4)
    v = torch.zeros(1, 4)
    x_t = torch.full((1, 4), 1e-3)
    lp, lm = nft_loss_terms(v, v, x0, x_t, torch.tensor([0.5]), 1.0)
    assert lp.item() == pytest.approx(1e-3, rel=1e-4) and lm.item() == pytest.approx(1e-3, rel=1e-4)


def test_nft_loss_metric_is_the_loss():
    """nft/loss is the combined loss (r·L+ + (1 - r)·L-)/beta, not one of its terms."""
    v = torch.tensor([[1.0, 2.0], [0.5, -1.0]])
    x0 = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    x_t = torch.tensor([[1.0, 1.0], [0.0, 2.0]])
    out = nft_loss(
        v, torch.zeros(2, 2), x0, x_t, torch.tensor([0.5, 0.8]), torch.tensor([0.3, 0.7]), beta=2.0
    )
    assert out.metrics["nft/loss"] == pytest.approx(float(out.loss))
    lp, lm = out.loss_plus, out.loss_minus
    assert float(out.loss) == pytest.approx(
        float((0.3 * lp[0] + 0.7 * lm[0] + 0.7 * lp[1] + 0.3 * lm[1]) / 4)
    )


def test_ema_applied_to_a_given_parameter_list_swaps_those_and_restores_them():
    """applied(params) puts the EMA into the parameters given (here a second module's, of the same shapes), and
    restores them after; the module the EMA was built from is left alone."""
    a, b = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    with torch.no_grad():
        a.weight.fill_(1.0)
        a.bias.fill_(0.0)
        b.weight.fill_(5.0)
        b.bias.fill_(5.0)
    ema = EmaParams(a.parameters(), decay=0.5)
    x = torch.ones(1, 2)
    with torch.no_grad(), ema.applied(list(b.parameters())):
        assert b(x).item() == 2.0  # b holds the EMA (w = 1, bias 0)
        assert a(x).item() == 2.0
    assert b(x).item() == 15.0 and torch.equal(a.weight, torch.ones(1, 2))

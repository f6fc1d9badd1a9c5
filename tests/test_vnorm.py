"""Velocity-norm hinge: zero below the reference norm, no gradient into the reference, bucketed ratios."""

import pytest
import torch

from imgalign.trainers.vnorm import (
    InflationMeter,
    norm_ratio,
    step_bucket,
    velocity_norm_penalty,
)

torch.set_num_threads(1)


def test_penalty_exactly_zero_when_not_inflated():
    g = torch.Generator().manual_seed(0)
    v_ref = torch.randn(5, 4, 3, 3, generator=g, requires_grad=True)
    scale = torch.tensor([0.2, 0.9, 1.0, 0.5, 0.999]).reshape(5, 1, 1, 1)
    # v_theta with norms <= the reference's (rotated direction, shrunk)
    v = v_ref.detach().flip(1) * scale  # same norm as the reference, other direction, then shrunk
    v.requires_grad_(True)
    for form in ("linear", "squared"):
        pen = velocity_norm_penalty(v, v_ref, form=form)
        assert torch.equal(pen, torch.zeros(5))
        pen.sum().backward()
        assert torch.equal(v.grad, torch.zeros_like(v))
        assert v_ref.grad is None
        v.grad = None


def test_penalty_values_and_gradient_only_through_v_theta():
    v_ref = torch.tensor([[3.0, 4.0], [0.0, 2.0]], requires_grad=True)  # norms 5, 2
    v = torch.tensor([[6.0, 8.0], [0.0, 1.0]], requires_grad=True)  # norms 10, 1
    lin = velocity_norm_penalty(v, v_ref, "linear")
    assert torch.allclose(lin, torch.tensor([1.0, 0.0]))
    sq = velocity_norm_penalty(v, v_ref, "squared")
    assert torch.allclose(sq, torch.tensor([1.0, 0.0]))
    lin.sum().backward()
    assert v_ref.grad is None
    # d(||v||/5)/dv = v/(5 ||v||) for the inflated sample, 0 for the other
    assert torch.allclose(v.grad, torch.tensor([[0.6 / 5, 0.8 / 5], [0.0, 0.0]]))
    v2 = torch.tensor([[3.3, 4.4]], requires_grad=True)  # ratio 1.1
    assert torch.allclose(velocity_norm_penalty(v2, v_ref[:1], "squared"), torch.tensor([0.01]))
    with pytest.raises(ValueError):
        velocity_norm_penalty(v2, v_ref[:1], "cubic")
    with pytest.raises(ValueError, match="match"):
        norm_ratio(v2, v_ref)


def test_linear_hinge_pins_the_norm_squared_leaves_inflation():
    """The documented choice: with a base loss pulling toward 1.1x the reference norm, lambda = 1 keeps the linear
    hinge's optimum at ratio 1 exactly, while the squared hinge's optimum sits at (1.1 + lambda)/(1 + lambda)."""
    v_ref = torch.ones(1, 16)  # rms 1
    rho = torch.linspace(0.9, 1.2, 3001)  # candidates v = rho * v_ref
    v = rho[:, None] * v_ref
    base = ((v - 1.1 * v_ref) ** 2).mean(1)  # (rho - 1.1)^2
    for form, expected in (("linear", 1.0), ("squared", 2.1 / 2.0)):
        total = base + 1.0 * velocity_norm_penalty(v, v_ref.expand_as(v), form=form)
        assert float(rho[total.argmin()]) == pytest.approx(expected, abs=2e-4), form


def test_buckets_and_meter():
    assert [step_bucket(i, 10) for i in range(10)] == ["early"] * 4 + ["middle"] * 3 + ["late"] * 3
    assert [step_bucket(i, 3) for i in range(3)] == ["early", "middle", "late"]
    m = InflationMeter()
    ref = torch.ones(2, 4)
    m.update(1.1 * ref, ref, step_index=0, num_steps=10)
    m.update(torch.stack([1.0 * ref[0], 1.2 * ref[0]]), ref, step_index=9, num_steps=10)
    m.update(0.9 * ref[:1], ref[:1], sigma=torch.tensor([0.5]))
    out = m.compute()
    assert out["vnorm/norm_ratio/early"] == pytest.approx(1.1)
    assert out["vnorm/norm_ratio/late"] == pytest.approx(1.1)
    assert out["vnorm/norm_ratio/middle"] == pytest.approx(0.9)
    assert out["vnorm/norm_ratio/all"] == pytest.approx((1.1 * 2 + 2.2 + 0.9) / 5)
    with pytest.raises(ValueError):
        m.update(ref, ref)
    m.reset()
    assert m.compute() == {}


def test_registered_penalties_are_the_linear_and_squared_hinge():
    """objective.penalty: vnorm is max(0, rho - 1), vnorm_squared its square (rho = 1.5 here)."""
    import imgalign.trainers.objectives  # noqa: F401  (registers the penalties)
    from imgalign.trainers.registry import PENALTIES

    v_ref = torch.tensor([[3.0, 4.0], [0.0, 2.0]])  # norms 5, 2
    v = torch.tensor([[4.5, 6.0], [0.0, 1.0]])  # norms 7.5, 1
    assert torch.allclose(PENALTIES.get("vnorm")(v, v_ref), torch.tensor([0.5, 0.0]))
    assert torch.allclose(PENALTIES.get("vnorm_squared")(v, v_ref), torch.tensor([0.25, 0.0]))


def test_step_bucket_range_and_bucket_means_hand_computed():
    from imgalign.trainers.vnorm import bucket_means

    with pytest.raises(ValueError, match="outside"):
        step_bucket(10, 10)
    with pytest.raises(ValueError, match="outside"):
        step_bucket(-1, 10)  # not 'late' through BUCKETS[-1]
    out = bucket_means(torch.tensor([1.0, 2.0, 4.0]), ["early", "late", "late"])
    assert out == pytest.approx(
        {"vnorm/norm_ratio/early": 1.0, "vnorm/norm_ratio/late": 3.0, "vnorm/norm_ratio/all": 7 / 3}
    )
    # rows that are not valid (a NaN one included) are left out; a bucket with no valid row is omitted
    ratio = torch.tensor([1.0, 2.0, float("nan"), 8.0])
    out = bucket_means(
        ratio, ["early", "late", "late", "middle"], valid=torch.tensor([False, True, False, True])
    )
    assert out == pytest.approx(
        {"vnorm/norm_ratio/late": 2.0, "vnorm/norm_ratio/middle": 8.0, "vnorm/norm_ratio/all": 5.0}
    )
    assert bucket_means(ratio, ["early"] * 4, valid=torch.zeros(4, dtype=torch.bool)) == {}
    with pytest.raises(ValueError, match="3 valid flags for 4 ratios"):
        bucket_means(ratio, ["early"] * 4, valid=torch.ones(3, dtype=torch.bool))


class _LineAdapter:
    """A 1-number 'latent' starting at 1 on the schedule 1, 0.5, 0: policy v(x) = 2x, reference v(x) = x + 0.5."""

    device = "cpu"

    def sigmas(self, num_steps):
        return torch.linspace(1.0, 0.0, num_steps + 1)

    def init_noise(self, gens):
        return torch.ones(len(gens), 1)

    def encode(self, prompts):
        return None

    def velocity(self, x, sigma, cond, guidance_scale, transformer):
        return transformer(x)

    def reference(self):
        import contextlib

        return contextlib.nullcontext(lambda x: x + 0.5)


def test_inflation_along_ode_follows_the_policys_own_euler_trajectory():
    """Step 0 at x = 1: ‖2‖/‖1.5‖ = 4/3 (early); the policy's Euler step x = 1 + 2·(0.5 − 1) = 0, where the ratio is
    0/0.5 = 0 (step 1 of 2: middle). The reference's trajectory (x = 0.25) or a reversed step (x = 2) give others."""
    from imgalign.trainers.vnorm import inflation_along_ode

    out = inflation_along_ode(_LineAdapter(), lambda x: 2 * x, ["a"], [0], num_steps=2, guidance_scale=1.0)
    assert out == pytest.approx(
        {
            "eval/vnorm/norm_ratio/early": 4 / 3,
            "eval/vnorm/norm_ratio/middle": 0.0,
            "eval/vnorm/norm_ratio/all": 2 / 3,
        }
    )


def test_sigma_buckets_at_and_around_the_thirds():
    """sigma > 2/3 early (near noise), > 1/3 middle, else late; exactly 2/3 is middle and exactly 1/3 is late."""
    from imgalign.trainers.vnorm import sigma_bucket

    got = [sigma_bucket(s) for s in (1.0, 0.9, 2.0 / 3.0, 0.5, 1.0 / 3.0, 0.1, 0.0)]
    assert got == ["early", "early", "middle", "middle", "late", "late", "late"]


def test_a_zero_reference_gives_a_finite_penalty():
    """A zero v_ref (and zero v_theta) gives penalty 0, not NaN."""
    z = torch.zeros(2, 3)
    assert torch.equal(velocity_norm_penalty(z, z), torch.zeros(2))


def test_bucket_names_must_match_the_ratios():
    from imgalign.trainers.vnorm import bucket_means

    with pytest.raises(ValueError, match="bucket names"):
        bucket_means(torch.ones(3), ["early", "late"])
    with pytest.raises(ValueError, match="one entry per sample"):
        InflationMeter().update(torch.ones(3, 2), torch.ones(3, 2), sigma=torch.tensor([0.5, 0.1]))
    with pytest.raises(ValueError, match="pass step_index and num_steps"):
        InflationMeter().update(torch.ones(3, 2), torch.ones(3, 2), step_index=1)


class _RecordingAdapter(_LineAdapter):
    """_LineAdapter that records every velocity call (which model, sigma, guidance) and the noise seeds."""

    def __init__(self):
        self.calls, self.seeds = [], []

    def init_noise(self, gens):
        self.seeds = [g.initial_seed() for g in gens]
        return torch.ones(len(gens), 1)

    def velocity(self, x, sigma, cond, guidance_scale, transformer):
        self.calls.append((getattr(transformer, "tag", "policy"), float(sigma), guidance_scale))
        return transformer(x)

    def reference(self):
        import contextlib

        def ref(x):
            return x + 0.5

        ref.tag = "ref"
        return contextlib.nullcontext(ref)


def test_inflation_along_ode_evaluates_the_reference_at_the_policys_sigma_and_guidance():
    from imgalign.trainers.vnorm import inflation_along_ode

    ad = _RecordingAdapter()
    inflation_along_ode(ad, lambda x: 2 * x, ["a", "b"], [5, 7], num_steps=2, guidance_scale=4.5)
    assert ad.seeds == [5, 7]
    assert ad.calls == [
        ("policy", 1.0, 4.5),
        ("ref", 1.0, 4.5),
        ("policy", 0.5, 4.5),
        ("ref", 0.5, 4.5),
    ]


def test_eval_inflation_takes_the_shapes_pool_in_turn(monkeypatch):
    """eval/vnorm on the shapes suite measures the first vnorm_images prompts of the suite's pool (its tasks in
    turn), not the (unused) held-out training prompts."""
    import imgalign.trainers.vnorm as V
    from imgalign.trainers.config import EvalConfig
    from imgalign.trainers.evaluation import eval_prompt_pool

    seen = {}
    monkeypatch.setattr(
        V, "inflation_along_ode", lambda ad, m, prompts, seeds, *a: seen.update(p=prompts, s=seeds)
    )
    cfg = EvalConfig(suite="shapes", prompts_per_task=2, vnorm_images=3)
    V.eval_inflation(None, None, cfg, 1.0, [("a held-out prompt", {})] * 4)
    assert seen["p"] == eval_prompt_pool(cfg, [])[:3] and len(set(seen["s"])) == 3


def test_norm_ratio_of_small_velocities_is_the_plain_ratio():
    """eps only guards a zero reference norm: velocities with norms well below 1 (0.05 and 0.1) give the plain ratio
    2 and the linear hinge 1, not a ratio shrunk by a floor on the denominator."""
    v_ref = torch.tensor([[0.03, 0.04]])  # norm 0.05
    v = torch.tensor([[0.06, 0.08]])  # norm 0.1
    assert norm_ratio(v, v_ref).item() == pytest.approx(2.0, rel=1e-6)
    assert velocity_norm_penalty(v, v_ref, "linear").item() == pytest.approx(1.0, rel=1e-5)

"""DiffusionNFT loss: hand-computed values, affinity in r, EMA old policy."""

import pytest
import torch

from imgalign.trainers.nft import (
    EmaParams,
    NFTConfig,
    ema_decay,
    nft_combine,
    nft_loss,
    nft_loss_terms,
    noisy_latent,
    optimality_probability,
    ref_velocity_loss,
    sample_nft_times,
)

torch.set_num_threads(1)


def test_optimality_probability_hand_values():
    a = torch.tensor([-3.0, -1.0, -0.5, 0.0, 0.25, 1.0, 7.0])
    r = optimality_probability(a, clip=1.0)
    assert torch.allclose(r, torch.tensor([0.0, 0.0, 0.25, 0.5, 0.625, 1.0, 1.0]))
    r2 = optimality_probability(a, clip=2.0)  # A/4 + 1/2
    assert torch.allclose(r2, torch.tensor([0.0, 0.25, 0.375, 0.5, 0.5625, 0.75, 1.0]))
    with pytest.raises(ValueError):
        optimality_probability(a, clip=0.0)
    for clip in (float("inf"), float("nan")):  # every r 1/2, or every r NaN, without a word
        with pytest.raises(ValueError, match="clip must be a finite number > 0"):
            optimality_probability(a, clip=clip)


def test_nft_loss_hand_computed():
    # B = 1 sample, D = 2 latent dims; everything chosen by hand.
    x0 = torch.tensor([[1.0, -1.0]])
    eps = torch.tensor([[0.0, 2.0]])
    t = torch.tensor([0.5])
    x_t = noisy_latent(x0, t, eps)
    assert torch.allclose(x_t, torch.tensor([[0.5, 0.5]]))
    # t = 1/4 tells x0 from the noise: 3/4·x0 + 1/4·eps per sample
    x_t2 = noisy_latent(torch.cat([x0, x0]), torch.tensor([0.25, 1.0]), torch.cat([eps, eps]))
    assert torch.allclose(x_t2, torch.tensor([[0.75, -0.25], [0.0, 2.0]]))
    v = torch.tensor([[-1.0, 2.0]], requires_grad=True)  # equals eps - x0 + [0, -1]
    v_old = torch.tensor([[-1.0, 3.0]])  # the exact target eps - x0
    beta, r = 0.5, torch.tensor([0.75])
    # v+ = 0.5 v + 0.5 v_old = [-1, 2.5]; x0+ = x_t - 0.5 v+ = [1, -0.75]; err+ = [0, 0.25]
    # L+ = mean(err^2)/mean|err| = (0.0625/2)/(0.25/2) = 0.25
    # v- = 1.5 v_old - 0.5 v = [-1, 3.5]; x0- = [1, -1.25]; err- = [0, -0.25]; L- = 0.25
    lp, lm = nft_loss_terms(v, v_old, x0, x_t, t, beta)
    assert torch.allclose(lp, torch.tensor([0.25])) and torch.allclose(lm, torch.tensor([0.25]))
    out = nft_loss(v, v_old, x0, x_t, t, r, beta)
    assert torch.allclose(out.loss, torch.tensor(0.25 / 0.5))
    out.loss.backward()
    # d/dv of (r L+ + (1-r) L-)/beta with stop-grad weights w = 0.125:
    # dL+/dv = (2 err+/D / w) * (-t beta) ; dL-/dv = (2 err-/D / w) * (+t beta)
    w = 0.125
    g_plus = 2 * torch.tensor([0.0, 0.25]) / 2 / w * (-0.5 * 0.5)
    g_minus = 2 * torch.tensor([0.0, -0.25]) / 2 / w * (0.5 * 0.5)
    expected = (0.75 * g_plus + 0.25 * g_minus) / beta
    assert torch.allclose(v.grad, expected[None])


def test_nft_loss_terms_hand_computed_at_beta_two():
    """beta = 2 (at 0.5 the implicit policies are symmetric in v and v_old, so swapped coefficients would pass)."""
    x0 = torch.tensor([[1.0, -1.0]])
    x_t = noisy_latent(x0, torch.tensor([0.5]), torch.tensor([[0.0, 2.0]]))  # [0.5, 0.5]
    v, v_old = torch.tensor([[-1.0, 2.0]]), torch.tensor([[-1.0, 3.0]])
    # v+ = 2v - v_old = [-1, 1]: x0+ = x_t - 0.5 v+ = [1, 0], err+ = [0, 1], L+ = (1/2)/(1/2) = 1
    # v- = 3v_old - 2v = [-1, 5]: x0- = [1, -2], err- = [0, -1], L- = 1
    lp, lm = nft_loss_terms(v, v_old, x0, x_t, torch.tensor([0.5]), beta=2.0)
    assert torch.allclose(lp, torch.tensor([1.0])) and torch.allclose(lm, torch.tensor([1.0]))
    # v_old = [-1, 4]: v+ = [-1, 0], err+ = [0, 1.5], L+ = 1.5; v- = [-1, 8], err- = [0, -2.5], L- = 2.5
    lp, lm = nft_loss_terms(v, torch.tensor([[-1.0, 4.0]]), x0, x_t, torch.tensor([0.5]), beta=2.0)
    assert torch.allclose(lp, torch.tensor([1.5])) and torch.allclose(lm, torch.tensor([2.5]))


def test_nft_loss_affine_in_r():
    g = torch.Generator().manual_seed(0)
    x0 = torch.randn(6, 3, 4, 4, generator=g)
    t = sample_nft_times(6, generator=g)
    x_t = noisy_latent(x0, t, torch.randn(6, 3, 4, 4, generator=g))
    v = torch.randn(6, 3, 4, 4, generator=g)
    v_old = v + 0.1 * torch.randn(6, 3, 4, 4, generator=g)
    lp, lm = nft_loss_terms(v, v_old, x0, x_t, t, beta=0.7)
    r0, r1 = torch.rand(6, generator=g), torch.rand(6, generator=g)
    f = lambda r: nft_combine(r, lp, lm, 0.7)  # noqa: E731
    for lam in (-0.5, 0.3, 2.0):
        assert torch.allclose(f(lam * r0 + (1 - lam) * r1), lam * f(r0) + (1 - lam) * f(r1), atol=1e-6)
    # r = 1 is the pure positive loss, r = 0 the pure negative one
    assert torch.allclose(f(torch.ones(6)), lp.mean() / 0.7)
    assert torch.allclose(f(torch.zeros(6)), lm.mean() / 0.7)


def test_v_old_gets_no_gradient_and_shapes_checked():
    v = torch.randn(2, 4, requires_grad=True)
    v_old = torch.randn(2, 4, requires_grad=True)
    x0, x_t = torch.randn(2, 4), torch.randn(2, 4)
    out = nft_loss(v, v_old, x0, x_t, torch.tensor([0.3, 0.8]), torch.tensor([0.2, 0.9]), beta=1.0)
    out.loss.backward()
    assert v_old.grad is None and v.grad is not None
    with pytest.raises(ValueError, match="same shape"):
        nft_loss_terms(v, v_old[:1], x0, x_t, torch.tensor([0.3, 0.8]), 1.0)
    with pytest.raises(ValueError, match="beta"):
        nft_loss(v, v_old, x0, x_t, torch.tensor([0.3, 0.8]), torch.tensor([0.2, 0.9]), beta=0.0)


def test_ref_loss_and_times():
    v, vr = torch.tensor([[1.0, 2.0]], requires_grad=True), torch.tensor([[0.0, 0.0]], requires_grad=True)
    loss = ref_velocity_loss(v, vr)
    assert torch.allclose(loss, torch.tensor(2.5))
    loss.backward()
    assert vr.grad is None
    # per-sample means 2.5, 8.0 and NaN (a masked sample): weighted by the valid mask, the NaN row is left out
    v3 = torch.tensor([[1.0, 2.0], [4.0, 0.0], [float("nan"), 0.0]], requires_grad=True)
    masked = ref_velocity_loss(v3, torch.zeros(3, 2), torch.tensor([1.0, 1.0, 0.0]))
    assert torch.allclose(masked, torch.tensor((2.5 + 8.0) / 2))
    masked.backward()
    assert torch.equal(v3.grad[2], torch.zeros(2))
    assert float(ref_velocity_loss(v3.detach(), torch.zeros(3, 2), torch.zeros(3))) == 0.0
    with pytest.raises(ValueError, match="weights must have shape"):
        ref_velocity_loss(v3, torch.zeros(3, 2), torch.ones(2))
    t = sample_nft_times(8, 0.2, 0.6, generator=torch.Generator().manual_seed(1))
    assert t.min() >= 0.2 and t.max() <= 0.6
    # stratified: one draw per stratum of width 0.05
    assert sorted(((t - 0.2) / 0.05).floor().long().tolist()) == list(range(8))


def test_ema_params_update_and_applied():
    lin = torch.nn.Linear(2, 1)
    with torch.no_grad():
        lin.weight.fill_(1.0)
        lin.bias.fill_(0.0)
    ema = EmaParams(lin.parameters(), decay=0.5)
    with torch.no_grad():
        lin.weight.fill_(3.0)
    ema.update()
    assert torch.allclose(ema.shadow[0], torch.full((1, 2), 2.0))
    x = torch.ones(1, 2)
    with torch.no_grad(), ema.applied():
        assert torch.allclose(lin(x), torch.tensor([[4.0]]))
    assert torch.allclose(lin.weight, torch.full((1, 2), 3.0))  # restored
    ema.update(decay=0.0)
    assert torch.allclose(ema.shadow[0], torch.full((1, 2), 3.0))
    state = ema.state_dict()
    ema2 = EmaParams(lin.parameters())
    ema2.load_state_dict(state)
    assert torch.allclose(ema2.shadow[0], ema.shadow[0])
    # functional call: EMA weights substituted, live weights untouched, usable after a forward that keeps a graph
    ema_f = EmaParams.from_module(lin, decay=0.5)  # shadow weight = 3
    with torch.no_grad():
        lin.weight.fill_(5.0)
    y = lin(x).sum()
    ema_f.update()  # shadow weight = 4
    with torch.no_grad():
        assert torch.allclose(ema_f.functional(lin, x), torch.tensor([[8.0]]))
    y.backward()
    assert torch.allclose(lin.weight.grad, torch.ones(1, 2)) and torch.allclose(
        lin.weight, torch.full((1, 2), 5.0)
    )
    with pytest.raises(ValueError, match="from_module"):
        ema.functional(lin, x)
    assert ema_decay(0, 0.001, 0.9) == 0.0 and ema_decay(500, 0.001, 0.9) == pytest.approx(0.5)
    assert ema_decay(10_000, 0.001, 0.9) == 0.9
    assert ema_decay(-3, 0.001, 0.9) == 0.0  # never a negative decay


def test_config_validation():
    NFTConfig().validate()
    with pytest.raises(ValueError, match="beta"):
        NFTConfig(beta=0.0).validate()
    with pytest.raises(ValueError, match="t_min"):
        NFTConfig(t_min=0.8, t_max=0.5).validate()
    with pytest.raises(ValueError, match="t_min"):
        NFTConfig(t_min=0.5, t_max=0.5).validate()  # an empty range
    with pytest.raises(ValueError, match="ema_decay_max"):
        NFTConfig(ema_decay_max=1.0).validate()  # the old policy would never move
    NFTConfig(t_min=0.0, t_max=1.0, ema_decay_max=0.0, ema_decay_ramp=0.0).validate()
    with pytest.raises(ValueError, match="guidance_scale must be >= 1"):
        NFTConfig(guidance_scale=0.5).validate()
    with pytest.raises(ValueError, match="ref_weight must be >= 0"):
        NFTConfig(ref_weight=-0.1).validate()
    for name in ("beta", "adv_clip", "ref_weight", "guidance_scale", "ema_decay_ramp"):
        with pytest.raises(ValueError, match=rf"objective.nft.{name} must be finite \(got inf\)"):
            NFTConfig(**{name: float("inf")}).validate()


class _Toy1D(torch.nn.Module):
    """v(x_t, t) = exact velocity of N(0, 1) data + a small MLP residual that starts at zero."""

    def __init__(self):
        super().__init__()
        self.res = torch.nn.Sequential(torch.nn.Linear(2, 32), torch.nn.SiLU(), torch.nn.Linear(32, 1))
        torch.nn.init.zeros_(self.res[2].weight)
        torch.nn.init.zeros_(self.res[2].bias)

    def forward(self, x, t):  # x [B, 1], t [B]
        tt = t[:, None]
        base = (2 * tt - 1) * x / ((1 - tt) ** 2 + tt**2)
        return base + self.res(torch.cat([x, tt], dim=1))


def _sample(model, n, gen, steps=10):
    x = torch.randn(n, 1, generator=gen)
    ts = torch.linspace(1.0, 0.0, steps + 1)
    with torch.no_grad():
        for i in range(steps):
            x = x + model(x, ts[i].expand(n)) * (ts[i + 1] - ts[i])
    return x


def test_nft_training_moves_samples_toward_reward():
    """End-to-end sign check: reward = x0, a few NFT updates raise the mean of fresh samples."""
    from imgalign.trainers.balance import group_normalize

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = _Toy1D()
    ema = EmaParams.from_module(model)
    before = float(_sample(model, 512, gen).mean())
    for step in range(20):
        x0 = _sample(model, 64, gen)
        r = optimality_probability(group_normalize(x0[:, 0], torch.arange(64) // 8))
        t = sample_nft_times(64, 0.05, 0.95, generator=gen)
        x_t = noisy_latent(x0, t, torch.randn(64, 1, generator=gen))
        with torch.no_grad():
            v_old = ema.functional(model, x_t, t)
        loss = nft_loss(model(x_t, t), v_old, x0, x_t, t, r, beta=1.0).loss
        model.zero_grad()
        loss.backward()
        with torch.no_grad():  # plain SGD (torch.optim's first step imports dynamo: ~10 s on a loaded CPU)
            for p in model.parameters():
                p -= 0.02 * p.grad
        ema.update(decay=ema_decay(step, 0.01, 0.5))
    after = float(_sample(model, 512, gen).mean())
    assert after > before + 0.3, (before, after)


def test_objective_ema_decay_ramps_per_update_and_survives_a_checkpoint():
    """NFTObjective.after_update: update k (counted from 1) moves the old policy with decay
    min(ema_decay_max, ema_decay_ramp·k); the update count and the old policy's weights travel in the state dict,
    also into an objective that has not built its old policy yet."""
    from imgalign.trainers.config import ObjectiveConfig, SamplingConfig
    from imgalign.trainers.objectives import NFTObjective

    cfg = ObjectiveConfig(name="nft", nft=NFTConfig(ema_decay_ramp=0.25, ema_decay_max=0.6))
    obj = NFTObjective(cfg, SamplingConfig())
    p = torch.nn.Parameter(torch.zeros(2))
    obj.after_update([p])  # k = 1, decay 0.25: the old policy is built from p (0) and stays 0
    with torch.no_grad():
        p.fill_(4.0)
    obj.after_update([p])  # k = 2, decay 0.5: 0.5·0 + 0.5·4
    assert torch.allclose(obj.old.shadow[0], torch.full((2,), 2.0))
    state = obj.state_dict()
    assert state["updates"] == 2
    fresh = NFTObjective(cfg, SamplingConfig())
    fresh.load_state_dict(state)
    with torch.no_grad():
        p.fill_(7.0)
    fresh.after_update([p])  # k = 3, decay min(0.6, 0.75) = 0.6: 0.6·2 + 0.4·7
    assert fresh.updates == 3
    assert torch.allclose(fresh.old.shadow[0], torch.full((2,), 4.0))


def test_config_refuses_a_zero_advantage_clip():
    """adv_clip = c divides A in r = clip(A, -c, c)/(2c) + 1/2: c = 0 must be refused, not accepted."""
    with pytest.raises(ValueError, match="adv_clip"):
        NFTConfig(adv_clip=0.0).validate()
    NFTConfig(adv_clip=1e-3).validate()


def test_nft_times_follow_the_generator_and_shapes_are_checked():
    """The same generator seed draws the same t (stratified or iid: resume reproduces the run); t of the wrong
    length and r of the wrong shape are refused rather than broadcast."""
    for stratified in (True, False):
        a = sample_nft_times(6, generator=torch.Generator().manual_seed(3), stratified=stratified)
        b = sample_nft_times(6, generator=torch.Generator().manual_seed(3), stratified=stratified)
        c = sample_nft_times(6, generator=torch.Generator().manual_seed(4), stratified=stratified)
        assert torch.equal(a, b) and not torch.equal(a, c)
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="t must have shape"):
        nft_loss_terms(x, x, x, x, torch.tensor([0.5]), 1.0)
    with pytest.raises(ValueError, match="nft_combine"):
        nft_combine(torch.tensor([0.5]), torch.ones(2), torch.ones(2), 1.0)


def test_nft_loss_metrics_report_each_term_mean():
    """nft/loss_plus and nft/loss_minus are the means of L+ and L- (here they differ: v_theta != v_old)."""
    v = torch.tensor([[1.0, 2.0], [0.5, -1.0]])
    v_old = torch.zeros(2, 2)
    x0 = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    x_t = torch.tensor([[1.0, 1.0], [0.0, 2.0]])
    t = torch.tensor([0.5, 0.8])
    out = nft_loss(v, v_old, x0, x_t, t, torch.tensor([0.3, 0.7]), beta=1.0)
    lp, lm = nft_loss_terms(v, v_old, x0, x_t, t, 1.0)
    assert float(lp.mean()) != pytest.approx(float(lm.mean()))
    assert out.metrics["nft/loss_plus"] == pytest.approx(float(lp.mean()))
    assert out.metrics["nft/loss_minus"] == pytest.approx(float(lm.mean()))
    assert out.metrics["nft/r_mean"] == pytest.approx(0.5)


def test_ema_decay_one_freezes_and_mismatches_are_refused():
    """decay 1 (allowed) keeps the shadow; a parameter list of other shapes, or a saved EMA with another count of
    tensors, is refused; load_state_dict restores the saved decay."""
    lin = torch.nn.Linear(2, 1)
    ema = EmaParams(lin.parameters(), decay=0.5)
    before = [s.clone() for s in ema.shadow]
    with torch.no_grad():
        lin.weight.add_(1.0)
    ema.update(decay=1.0)
    assert all(torch.equal(s, b) for s, b in zip(ema.shadow, before))
    other = torch.nn.Linear(3, 1)
    with pytest.raises(ValueError, match="does not match"):
        ema.update(list(other.parameters()))
    with pytest.raises(ValueError, match="number of parameters"):
        ema.load_state_dict({"decay": 0.5, "shadow": ema.shadow[:1]})
    ema2 = EmaParams(lin.parameters(), decay=0.9)
    ema2.load_state_dict({"decay": 0.25, "shadow": [s.clone() for s in ema.shadow]})
    assert ema2.decay == 0.25
    # same count, other shapes: refused at load, naming the parameter (it failed only at the next update)
    named = EmaParams.from_module(lin)
    with pytest.raises(ValueError, match=r"saved EMA of weight has shape \[1, 3\], the model's is \[1, 2\]"):
        named.load_state_dict(
            {"decay": 0.5, "shadow": [s.clone() for s in EmaParams(other.parameters()).shadow]}
        )
    assert torch.equal(named.shadow[0], lin.weight.detach().float())


def test_ema_state_is_a_snapshot_and_construction_is_checked():
    """state_dict() is a copy (a later update leaves a saved state as it was) and load_state_dict copies in (updates
    after loading leave the given state alone); an empty parameter list or a wrong count of names is refused."""
    lin = torch.nn.Linear(2, 1)
    ema = EmaParams(lin.parameters(), decay=0.5)
    state = ema.state_dict()
    saved = [s.clone() for s in state["shadow"]]
    with torch.no_grad():
        lin.weight.add_(2.0)
    ema.update()
    assert all(torch.equal(a, b) for a, b in zip(state["shadow"], saved))
    ema2 = EmaParams(lin.parameters(), decay=0.5)
    ema2.load_state_dict(state)
    ema2.update()
    assert all(torch.equal(a, b) for a, b in zip(state["shadow"], saved))
    with pytest.raises(ValueError, match="no parameters"):
        EmaParams([])
    with pytest.raises(ValueError, match="one name per parameter"):
        EmaParams(lin.parameters(), names=["weight"])


def test_nft_config_defaults_are_the_documented_ones():
    """beta 1, c 1, t over all of [0, 1], no pull to the base, CFG-free velocity, EMA decay 0.001·k capped at 0.9."""
    c = NFTConfig()
    assert (c.beta, c.adv_clip, c.ref_weight, c.guidance_scale) == (1.0, 1.0, 0.0, 1.0)
    assert (c.t_min, c.t_max, c.ema_decay_max, c.ema_decay_ramp) == (0.0, 1.0, 0.9, 0.001)


def test_nft_loss_terms_check_x_t_and_stay_finite_at_zero_error():
    """x_t of another shape is refused; when x0_hat± = x0 exactly the losses are 0 (the adaptive weight is clamped
    at eps, not 0/0 = NaN), and so is the gradient."""
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="same shape"):
        nft_loss_terms(x, x, x, torch.zeros(2, 2), torch.tensor([0.5, 0.5]), 1.0)
    x0 = torch.tensor([[1.0, -2.0, 0.5], [0.0, 3.0, 1.0]])
    v = torch.tensor([[0.5, 1.0, -1.0], [2.0, 0.0, 1.0]], requires_grad=True)
    t = torch.tensor([0.25, 0.75])
    x_t = x0 + t[:, None] * v.detach()  # x_t - t·v = x0 for v+ = v- = v (v_old = v)
    lp, lm = nft_loss_terms(v, v.detach(), x0, x_t, t, 1.0)
    assert torch.equal(lp, torch.zeros(2)) and torch.equal(lm, torch.zeros(2))
    (lp.sum() + lm.sum()).backward()
    assert torch.equal(v.grad, torch.zeros(2, 3))


def test_nft_loss_terms_compute_low_precision_inputs_in_float32():
    """bf16 velocities are promoted: the per-sample losses are float32 and equal the float32 computation of the
    same (bf16-exact) values; noisy_latent keeps the latents' dtype."""
    g = torch.Generator().manual_seed(0)
    v, vo, x0, x_t = (torch.randn(2, 8, generator=g).bfloat16() for _ in range(4))
    t = torch.tensor([0.3, 0.9])
    lp, lm = nft_loss_terms(v, vo, x0, x_t, t, 1.5)
    assert lp.dtype == torch.float32 and lm.dtype == torch.float32
    ref = nft_loss_terms(v.float(), vo.float(), x0.float(), x_t.float(), t, 1.5)
    assert torch.equal(lp, ref[0]) and torch.equal(lm, ref[1])
    assert noisy_latent(x0, t, x_t).dtype == torch.bfloat16


def test_ema_from_module_tracks_trainable_parameters_in_their_dtype():
    """from_module keeps only the trainable (requires_grad) parameters, and functional() substitutes the float32
    shadow cast to each parameter's dtype (a bf16 module runs in bf16)."""
    lin = torch.nn.Linear(2, 1).bfloat16()
    lin.bias.requires_grad_(False)
    ema = EmaParams.from_module(lin, decay=0.5)
    assert ema.names == ["weight"] and len(ema.shadow) == 1 and ema.shadow[0].dtype == torch.float32
    x = torch.tensor([[1.0, -2.0]], dtype=torch.bfloat16)
    out = ema.functional(lin, x)
    assert out.dtype == torch.bfloat16 and torch.equal(out, lin(x))


def test_objective_state_loads_into_an_old_policy_already_built():
    """load_state_dict into an objective that has already built its old policy (it has trained) replaces that
    policy's weights with the saved ones, not only the update count."""
    from imgalign.trainers.config import ObjectiveConfig, SamplingConfig
    from imgalign.trainers.objectives import NFTObjective

    cfg = ObjectiveConfig(name="nft", nft=NFTConfig(ema_decay_ramp=0.0, ema_decay_max=0.0))
    p = torch.nn.Parameter(torch.full((2,), 3.0))
    saved = NFTObjective(cfg, SamplingConfig())
    saved.after_update([p])  # decay 0: the old policy is p (3)
    state = saved.state_dict()
    used = NFTObjective(cfg, SamplingConfig())
    with torch.no_grad():
        p.fill_(9.0)
    used.after_update([p])  # its own old policy: 9
    used.load_state_dict(state)
    assert used.updates == 1
    assert torch.equal(used.old.shadow[0], torch.full((2,), 3.0))


def test_nft_loss_sends_no_gradient_into_r():
    """r is a fixed target weight (from the rewards): a differentiable r gets no gradient, v_theta does."""
    v = torch.randn(2, 3, generator=torch.Generator().manual_seed(0), requires_grad=True)
    r = torch.tensor([0.2, 0.9], requires_grad=True)
    x0, x_t = torch.zeros(2, 3), torch.ones(2, 3)
    nft_loss(v, torch.zeros(2, 3), x0, x_t, torch.tensor([0.3, 0.8]), r, beta=1.0).loss.backward()
    assert r.grad is None and v.grad is not None


def test_ema_update_refuses_a_decay_above_one():
    """decay > 1 would extrapolate away from the weights (ema <- d·ema + (1 - d)·p): refused, the shadow unchanged."""
    ema = EmaParams(torch.nn.Linear(2, 1).parameters(), decay=0.5)
    before = [s.clone() for s in ema.shadow]
    with pytest.raises(ValueError, match=r"decay must be in \[0, 1\] \(got 1.5\)"):
        ema.update(decay=1.5)
    with pytest.raises(ValueError, match="decay must be in"):
        ema.update(decay=-0.1)
    assert all(torch.equal(s, b) for s, b in zip(ema.shadow, before))

"""Mutation round 21 (stop 58): the GRPO objective's KL, anchor and step-weight terms on a closed-form flow
model. The policy and the frozen reference are two tiny velocity fields v = a·x + b·(1 + σ)·c (c the prompt's
code), so every expected value is computed here from :mod:`imgalign.trainers.kernels` directly, in well under
a second (the tiny SD3 tests of these terms take minutes)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from imgalign.adapters import Cond
from imgalign.trainers import kernels as K
from imgalign.trainers.config import ObjectiveConfig, SamplingConfig
from imgalign.trainers.objectives import GRPOObjective, NFTObjective, TrainContext
from imgalign.trainers.rollout import Rollout, RolloutContext, flat_rollout

torch.set_num_threads(1)


class _Net(torch.nn.Module):
    """v = a·x + b·(1 + σ)·c: depends on the latent, the noise level and the prompt."""

    def __init__(self, a: float, b: float) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor(a))
        self.b = torch.nn.Parameter(torch.tensor(b))

    def forward(self, x: torch.Tensor, sigma: torch.Tensor | float, cond: Cond) -> torch.Tensor:
        s = K._bcast(sigma, x)
        return self.a * x + self.b * (1 + s) * cond.pooled.view(-1, 1, 1, 1)


class _Adapter:
    """The flow-adapter surface the rollout and the objective use; latents [2, 4, 4]."""

    device = torch.device("cpu")

    def __init__(self, policy: _Net, ref: _Net) -> None:
        self.transformer, self.ref = policy, ref

    def init_noise(self, gens: list[torch.Generator]) -> torch.Tensor:
        return torch.stack([torch.randn(2, 4, 4, generator=g) for g in gens])

    def sigmas(self, n: int) -> torch.Tensor:
        return torch.linspace(1.0, 0.0, n + 1)

    def encode(self, prompts: list[str]) -> Cond:
        code = torch.tensor([0.1 * len(p) for p in prompts])
        return Cond(code.view(-1, 1, 1), code.view(-1, 1))

    def velocity(self, x, sigma, cond, scale, transformer=None):  # noqa: ANN001, ANN201
        return transformer(x, sigma, cond)

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x[:, :1]).expand(-1, 3, -1, -1)

    def nfe_per_step(self, scale: float) -> int:
        return 1

    @contextlib.contextmanager
    def reference(self) -> Iterator[_Net]:
        yield self.ref

    def trainable_named_parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        return list(self.transformer.named_parameters())


PROMPTS = ["a", "bb", "ccc", "dddd"]
VALID = torch.tensor([True, True, False, True])


def _setup(
    sampling: dict[str, Any], step: int = 0, reduce: str = "sum"
) -> tuple[_Adapter, SamplingConfig, Rollout]:
    """The base model's rollout of 4 prompts (groups of 2) and an adapter whose policy is off the base."""
    s = SamplingConfig(**{"group_size": 2, "noise_level": 0.8, **sampling})
    adapter = _Adapter(_Net(-0.4, 0.9), _Net(-0.5, 1.0))
    ctx = RolloutContext(adapter, adapter.ref, s, 0, step, reduce)
    ids = torch.arange(4)
    return adapter, s, flat_rollout(ctx, PROMPTS, [{}] * 4, ids, ids // 2)


def _loss(obj: Any, adapter: _Adapter, ro: Rollout, term: int, step: int = 0) -> tuple[float, dict[str, Any]]:
    ctx = TrainContext(adapter, adapter.transformer, step)
    adv = torch.tensor([1.0, -1.0, 0.5, 0.25])
    loss, metrics = obj.loss(ctx, ro, torch.arange(4), term, adv, VALID)
    return float(loss.detach()), metrics


def _kl(adapter: _Adapter, ro: Rollout, s: SamplingConfig, j: int, reduce: str) -> torch.Tensor:
    """Per-row closed-form KL(π_θ ‖ π_ref) of step j -> j+1 from the stored x_j, by hand from the kernels."""
    x, sig = ro.latents[:, j], ro.sigmas
    cond = ro.cond

    def mean(net: _Net) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            v = net(x, sig[j], cond)
        return K.flow_sde_mean_std(x, v, sig[j], sig[j + 1], s.noise_level, sig[1], s.noise_block)

    (mp, std), (mq, _) = mean(adapter.transformer), mean(adapter.ref)
    return K.gaussian_kl_equal_std(mp, mq, std, reduce, s.noise_block)  # type: ignore[arg-type]


def _step_log_density(adapter: _Adapter, s: SamplingConfig, ro: Rollout, i: int) -> torch.Tensor:
    """log π_θ(x_{i+1} | x_i) of every row at step i under the adapter's current transformer. [B]"""
    x, y, sig = ro.latents[:, i], ro.latents[:, i + 1], ro.sigmas
    with torch.no_grad():
        v = adapter.transformer(x, sig[i], ro.cond)
    return K.flow_sde_step(x, v, sig[i], sig[i + 1], s.noise_level, sig[1], prev_sample=y).log_prob


def _valid_mean(x: torch.Tensor) -> float:
    return float(x[VALID].double().mean())


@pytest.mark.parametrize(("reduce", "block"), [("sum", 1), ("mean", 2)])
def test_the_kl_term_is_beta_times_the_valid_rows_mean_kl_reduced_and_blocked_as_configured(
    reduce: str, block: int
):
    """kl_beta·KL: the loss with objective.kl_beta 0.3 minus the loss without is 0.3 × the valid rows' mean of
    the per-row closed-form KL, with the configured log-density reduction and, with sampling.noise_block 2,
    the KL of the block-noise Gaussian (in block coordinates); the logged policy/kl is that mean."""
    adapter, s, ro = _setup({"num_steps": 3, "noise_block": block}, reduce=reduce)
    with_kl = GRPOObjective(ObjectiveConfig(kl_beta=0.3, logprob_reduce=reduce), s)  # type: ignore[arg-type]
    without = GRPOObjective(ObjectiveConfig(logprob_reduce=reduce), s)  # type: ignore[arg-type]
    kl = _valid_mean(_kl(adapter, ro, s, 1, reduce))
    assert kl > 0
    (a, m), (b, _) = _loss(with_kl, adapter, ro, 1), _loss(without, adapter, ro, 1)
    assert m["policy/kl"] == pytest.approx(kl, rel=1e-5)
    assert a - b == pytest.approx(0.3 * kl, rel=1e-4)


def test_the_anchor_is_n_times_beta_times_the_kl_of_the_untrained_step_of_this_update_on_the_first_term():
    """objective.anchor_beta: 5 steps, SDE window [0, 1] (n = 2 trained steps), untrained steps 2 and 3 taken
    in turn by training step (step 1: step 3). The first term's loss gains n·β·(valid rows' mean KL at step 3,
    the policy's velocity at σ_3, the configured reduction); the second term gains nothing (the trainer
    averages terms: the anchor counts once per update)."""
    adapter, s, ro = _setup(
        {"num_steps": 5, "sde_window": 2, "sde_window_max_start": 0}, step=1, reduce="mean"
    )
    assert ro.train_steps == [0, 1]
    cfg = {"logprob_reduce": "mean"}
    anchored = GRPOObjective(ObjectiveConfig(anchor_beta=0.2, **cfg), s)  # type: ignore[arg-type]
    plain = GRPOObjective(ObjectiveConfig(**cfg), s)  # type: ignore[arg-type]
    kl3 = _valid_mean(_kl(adapter, ro, s, 3, "mean"))
    assert abs(kl3 - _valid_mean(_kl(adapter, ro, s, 2, "mean"))) > 0.05 * kl3  # the step shows
    (a, m), (b, _) = _loss(anchored, adapter, ro, 0, step=1), _loss(plain, adapter, ro, 0, step=1)
    assert m["policy/anchor_kl"] == pytest.approx(kl3, rel=1e-5)
    assert a - b == pytest.approx(2 * 0.2 * kl3, rel=1e-4)
    (a1, m1), (b1, _) = _loss(anchored, adapter, ro, 1, step=1), _loss(plain, adapter, ro, 1, step=1)
    assert a1 == pytest.approx(b1, rel=1e-6) and "policy/anchor_kl" not in m1
    kl2 = _valid_mean(_kl(adapter, ro, s, 2, "mean"))  # step 2: step 2 (never the last step, 4)
    assert _loss(anchored, adapter, ro, 0, step=2)[1]["policy/anchor_kl"] == pytest.approx(kl2, rel=1e-5)


def test_velocity_step_weights_scale_each_terms_policy_loss_by_its_own_steps_weight():
    """objective.step_weight velocity: the loss of trained step i is w_i (kernels.velocity_step_weights over
    the update's trained steps) times its uniform-weight loss, for the second trained step too."""
    adapter, s, ro = _setup({"num_steps": 5, "sde_window": 2, "sde_window_max_start": 0})
    weights = K.velocity_step_weights("sde", [float(x) for x in ro.sigmas], ro.train_steps, s.noise_level)
    assert abs(weights[0] - weights[1]) > 0.05
    velocity = GRPOObjective(ObjectiveConfig(step_weight="velocity"), s)
    uniform = GRPOObjective(ObjectiveConfig(), s)
    for i in ro.train_steps:
        lu = _loss(uniform, adapter, ro, i)[0]
        assert abs(lu) > 1e-3
        assert _loss(velocity, adapter, ro, i)[0] == pytest.approx(weights[i] * lu, rel=1e-5)


def test_every_setting_that_reads_the_frozen_reference_asks_for_it():
    """needs_reference (a full fine-tune keeps a frozen copy only then): GRPO with the anchor or vnorm_log
    alone, NFT with a velocity penalty alone, and neither objective by default."""
    s = SamplingConfig()
    assert GRPOObjective(ObjectiveConfig(anchor_beta=0.1), s).needs_reference
    assert GRPOObjective(ObjectiveConfig(vnorm_log=True), s).needs_reference
    assert not GRPOObjective(ObjectiveConfig(), s).needs_reference
    nft = ObjectiveConfig(name="nft", penalty="vnorm", penalty_weight=0.1)
    assert NFTObjective(nft, s).needs_reference
    assert not NFTObjective(ObjectiveConfig(name="nft"), s).needs_reference


def test_nft_draws_stratified_noise_levels_and_its_loss_is_the_valid_rows_mix_over_beta(monkeypatch):
    """objective nft (t in [0.2, 0.6], β 0.5, adv_clip 2): sample k of the 4-row micro-batch draws its t in
    the k-th quarter of [t_min, t_max]; the loss is the valid rows' mean of r·L⁺ + (1 − r)·L⁻ divided by β, r
    = clip(A, ±2)/4 + 1/2 (the optimality probability with the configured clip), once the policy has left the
    old policy (L⁺ ≠ L⁻)."""
    from imgalign.trainers import nft

    seen: dict[str, torch.Tensor] = {}
    terms = nft.nft_loss_terms

    def spy(v, v_old, x0, x_t, t, beta, *rest):  # noqa: ANN001, ANN202
        lp, lm = terms(v, v_old, x0, x_t, t, beta, *rest)
        seen.update(t=t.detach().clone(), lp=lp.detach().clone(), lm=lm.detach().clone())
        return lp, lm

    monkeypatch.setattr(nft, "nft_loss_terms", spy)
    adapter, s, ro = _setup({"num_steps": 3})
    from imgalign.trainers.nft import NFTConfig

    cfg = ObjectiveConfig(name="nft", nft=NFTConfig(t_min=0.2, t_max=0.6, beta=0.5, adv_clip=2.0))
    obj = NFTObjective(cfg, s)
    _loss(obj, adapter, ro, 0)  # the old policy is a copy of the weights here; the policy then moves off it
    with torch.no_grad():
        adapter.transformer.a.add_(0.2)
    loss = _loss(obj, adapter, ro, 0)[0]
    t = seen["t"].double()
    lo = 0.2 + 0.1 * torch.arange(4, dtype=torch.float64)
    assert bool(((t >= lo - 1e-6) & (t <= lo + 0.1 + 1e-6)).all()), t
    r = (torch.tensor([1.0, -1.0, 0.5, 0.25]) / 4 + 0.5).double()
    per = r * seen["lp"].double() + (1 - r) * seen["lm"].double()
    assert float((seen["lp"] - seen["lm"]).abs().min()) > 1e-3  # L⁺ ≠ L⁻: the mix shows
    assert loss == pytest.approx(_valid_mean(per) / 0.5, rel=1e-4)


def test_grpo_ratios_are_the_policys_over_the_stored_density_on_valid_unmasked_rows_and_a_nan_row_stays_out():
    """Off the base policy, the logged ratios are exp(log π_θ(x_{i+1}) − stored log-density) of the rows that
    are valid and not train-masked at this step (rows 0 and 3 here: row 2 invalid with a NaN stored density,
    row 1 masked by train_mask); the NaN leaves the loss and every ratio metric finite."""
    adapter, s, ro = _setup({"num_steps": 3})
    i = 1
    lp = _step_log_density(adapter, s, ro, i)
    ratio = torch.exp(lp - ro.log_probs[:, i])
    ro.log_probs[2, i] = float("nan")
    ro.train_mask = torch.ones(4, ro.log_probs.shape[1], dtype=torch.bool)
    ro.train_mask[1, i] = False
    loss, m = _loss(GRPOObjective(ObjectiveConfig(clip_range=10.0), s), adapter, ro, i)
    keep = ratio[[0, 3]]
    assert abs(float(keep[0] - keep[1])) > 1e-3 and abs(float(ratio[1] - keep.mean())) > 1e-3
    assert m["policy/ratio_min"] == pytest.approx(float(keep.min()), rel=1e-5)
    assert m["policy/ratio_max"] == pytest.approx(float(keep.max()), rel=1e-5)
    assert m["policy/ratio_mean"] == pytest.approx(float(keep.mean()), rel=1e-5)
    adv = torch.tensor([1.0, 0.25])
    assert loss == pytest.approx(float(-(adv * keep).mean()), rel=1e-5)


def test_the_velocity_penalty_is_weighted_and_averaged_over_the_valid_rows_only():
    """add_penalty with the vnorm hinge (λ 0.5): rows with ‖v_θ‖/‖v_ref‖ = 3, 2 and 5, the last masked: the
    loss gains 0.5 × mean(2, 1) and policy/penalty logs 1.5."""
    from imgalign.trainers.objectives import add_penalty

    v = torch.tensor([[3.0, 0.0], [0.0, 2.0], [5.0, 0.0]], requires_grad=True)
    v_ref, w = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]), torch.tensor([1.0, 1.0, 0.0])
    m: dict[str, Any] = {}
    cfg = ObjectiveConfig(penalty="vnorm", penalty_weight=0.5)
    assert float(add_penalty(cfg, torch.zeros(()), v, v_ref, w, m).detach()) == pytest.approx(0.75)
    assert m["policy/penalty"] == pytest.approx(1.5)

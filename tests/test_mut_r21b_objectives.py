"""Mutation round 21, second pass (stop 58): what the GRPO and NFT objectives log and when they read the frozen
reference, on round 21's closed-form flow model (no model loads): the logged log-density over valid rows, the
reference pass for vnorm_log or a penalty without a KL, the norm-ratio bucket of the trained step, and NFT's
noise draws that differ per term and per training step."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_mut_r21_objectives import VALID, _loss, _Net, _setup, _step_log_density, _valid_mean

from imgalign.trainers.config import ObjectiveConfig
from imgalign.trainers.nft import NFTConfig
from imgalign.trainers.objectives import GRPOObjective, NFTObjective
from imgalign.trainers.vnorm import sigma_bucket

torch.set_num_threads(1)


def test_the_logged_log_density_is_the_policys_mean_over_the_valid_rows():
    """policy/logprob is the mean of log π_θ(x_{i+1} | x_i) over the valid rows (row 2 left out)."""
    adapter, s, ro = _setup({"num_steps": 3})
    i = 1
    lp = _step_log_density(adapter, s, ro, i)
    assert abs(float(lp[2] - lp[VALID].mean())) > 1e-2  # the invalid row would move the mean
    _, m = _loss(GRPOObjective(ObjectiveConfig(), s), adapter, ro, i)
    assert m["policy/logprob"] == pytest.approx(_valid_mean(lp), rel=1e-5)


@pytest.mark.parametrize(
    "cfg",
    [{"vnorm_log": True}, {"penalty": "vnorm", "penalty_weight": 0.5}],
    ids=["vnorm_log", "penalty"],
)
def test_vnorm_log_or_a_penalty_without_a_kl_reads_the_reference_and_logs_the_norm_ratio_of_the_steps_bucket(
    cfg: dict[str, Any],
):
    """objective.vnorm_log alone, or a velocity penalty alone (kl_beta 0), still runs the reference forward:
    policy/kl, policy/vnorm_ratio and the ratio of the trained step's bucket (step 1 of 3: 'middle', not step
    0's 'early') are logged, and the penalty adds λ × the valid rows' hinge to the loss."""
    adapter, s, ro = _setup({"num_steps": 3})
    with torch.no_grad():
        adapter.transformer.a.fill_(-0.9)  # ‖v_θ‖ above ‖v_ref‖: the hinge is on
    obj = GRPOObjective(ObjectiveConfig(**cfg), s)  # type: ignore[arg-type]
    loss, m = _loss(obj, adapter, ro, 1)
    assert {"policy/kl", "policy/vnorm_ratio", "vnorm/norm_ratio/middle"} <= set(m)
    assert "vnorm/norm_ratio/early" not in m
    assert m["vnorm/norm_ratio/middle"] == pytest.approx(m["policy/vnorm_ratio"], rel=1e-6)
    plain = _loss(GRPOObjective(ObjectiveConfig(), s), adapter, ro, 1)[0]
    if "penalty_weight" in cfg:
        x, sig = ro.latents[:, 1], ro.sigmas
        with torch.no_grad():
            ratio = adapter.transformer(x, sig[1], ro.cond).flatten(1).norm(dim=1) / adapter.ref(
                x, sig[1], ro.cond
            ).flatten(1).norm(dim=1)
        hinge = (ratio - 1).clamp_min(0)
        assert _valid_mean(hinge) > 1e-3
        assert loss - plain == pytest.approx(0.5 * _valid_mean(hinge), rel=1e-4)
    else:
        assert loss == pytest.approx(plain, rel=1e-6)


def _nft_t(monkeypatch: pytest.MonkeyPatch, obj: NFTObjective, adapter: Any, ro: Any, term: int, step: int):
    from imgalign.trainers import nft

    seen: dict[str, torch.Tensor] = {}
    terms = nft.nft_loss_terms

    def spy(v, v_old, x0, x_t, t, beta, *rest):  # noqa: ANN001, ANN202
        seen["t"], seen["x_t"] = t.detach().clone(), x_t.detach().clone()
        return terms(v, v_old, x0, x_t, t, beta, *rest)

    monkeypatch.setattr(nft, "nft_loss_terms", spy)
    _, m = _loss(obj, adapter, ro, term, step=step)
    return seen["t"], seen["x_t"], m


def test_nft_draws_fresh_noise_for_every_term_and_every_training_step_reproducibly(monkeypatch):
    """Each (training step, term) of a sample draws its own t and ε: terms 0 and 1 of step 0, and term 0 of
    steps 0 and 1, differ; the same (step, term) draws the same again."""
    adapter, s, ro = _setup({"num_steps": 3})
    obj = NFTObjective(ObjectiveConfig(name="nft", terms_per_sample=2), s)
    t00, x00, _ = _nft_t(monkeypatch, obj, adapter, ro, 0, 0)
    t01, x01, _ = _nft_t(monkeypatch, obj, adapter, ro, 1, 0)
    t10, x10, _ = _nft_t(monkeypatch, obj, adapter, ro, 0, 1)
    again, x_again, _ = _nft_t(monkeypatch, obj, adapter, ro, 0, 0)
    assert torch.equal(t00, again) and torch.equal(x00, x_again)
    assert not torch.allclose(t00, t01) and not torch.allclose(x00, x01)
    assert not torch.allclose(t00, t10) and not torch.allclose(x00, x10)


def test_nft_logs_the_norm_ratio_in_the_buckets_of_its_sampled_noise_levels(monkeypatch):
    """NFT with vnorm_log: the per-bucket norm ratios are keyed by the buckets of the sampled t (sigma_bucket),
    here t in [0.1, 0.9] over 4 stratified rows, so more than one bucket shows."""
    adapter, s, ro = _setup({"num_steps": 3})
    cfg = ObjectiveConfig(name="nft", vnorm_log=True, nft=NFTConfig(t_min=0.1, t_max=0.9))
    t, _, m = _nft_t(monkeypatch, NFTObjective(cfg, s), adapter, ro, 0, 0)
    want = {f"vnorm/norm_ratio/{sigma_bucket(float(x))}" for x, ok in zip(t.tolist(), VALID.tolist()) if ok}
    assert len(want) >= 2
    want.add("vnorm/norm_ratio/all")
    assert {k for k in m if k.startswith("vnorm/norm_ratio/")} == want


def test_nft_reference_pull_is_the_valid_rows_mean_squared_velocity_gap(monkeypatch):
    """objective.nft.ref_weight 0.5: the loss gains 0.5 × the valid rows' mean of mean((v_θ − v_ref)²) at the
    sampled (x_t, t); the invalid row 2 is left out."""
    adapter, s, ro = _setup({"num_steps": 3})
    pulled = NFTObjective(ObjectiveConfig(name="nft", nft=NFTConfig(ref_weight=0.5)), s)
    plain = NFTObjective(ObjectiveConfig(name="nft"), s)
    t, x_t, _ = _nft_t(monkeypatch, pulled, adapter, ro, 0, 0)
    a = _loss(pulled, adapter, ro, 0)[0]
    b = _loss(plain, adapter, ro, 0)[0]
    with torch.no_grad():
        gap = (adapter.transformer(x_t, t, ro.cond) - adapter.ref(x_t, t, ro.cond)).pow(2).flatten(1).mean(1)
    assert abs(float(gap[2] - gap[VALID].mean())) > 1e-3 * float(gap.mean())
    assert a - b == pytest.approx(0.5 * _valid_mean(gap), rel=1e-4)


def test_nft_warns_when_it_trains_at_another_cfg_than_the_rollouts_sample_at_and_only_then(caplog):
    """Rollouts at CFG 4.5 and objective.nft.guidance_scale 1: one warning naming both scales; equal scales: none."""
    from imgalign.trainers.config import SamplingConfig

    with caplog.at_level("WARNING", logger="imgalign.trainers.objectives"):
        NFTObjective(ObjectiveConfig(name="nft"), SamplingConfig(guidance_scale=4.5))
    assert [r.getMessage() for r in caplog.records if "trains the velocity at CFG 1 but" in r.getMessage()]
    caplog.clear()
    with caplog.at_level("WARNING", logger="imgalign.trainers.objectives"):
        NFTObjective(
            ObjectiveConfig(name="nft", nft=NFTConfig(guidance_scale=4.5)), SamplingConfig(guidance_scale=4.5)
        )
    assert not caplog.records


def test_nft_noises_the_final_sample_to_its_t_and_compares_the_policy_with_the_old_policy_there(monkeypatch):
    """NFT's draw for (seed 0, step 0, term 0, sample i): u then ε from the sample's generator; x_t = (1 − t)·x0 +
    t·ε with x0 the rollout's final latent; nft_loss_terms gets v_θ (with a graph, the current weights) first
    and the old policy's velocity (the weights at the first loss, no graph) second."""
    from imgalign.trainers import nft
    from imgalign.trainers.prompting import _mix

    adapter, s, ro = _setup({"num_steps": 3})
    obj = NFTObjective(ObjectiveConfig(name="nft"), s)
    _loss(obj, adapter, ro, 0)  # the old policy: a copy of (−0.4, 0.9)
    with torch.no_grad():
        adapter.transformer.a.add_(0.2)
    seen: list[Any] = []
    terms = nft.nft_loss_terms

    def spy(v, v_old, x0, x_t, t, beta, *rest):  # noqa: ANN001, ANN202
        seen[:] = [v, v_old, x0, x_t, t]
        return terms(v, v_old, x0, x_t, t, beta, *rest)

    monkeypatch.setattr(nft, "nft_loss_terms", spy)
    _loss(obj, adapter, ro, 0)
    v, v_old, x0, x_t, t = seen
    assert torch.equal(x0, ro.latents[:, -1])
    gens = [torch.Generator().manual_seed(_mix(0, 0, 0, i, 4242)) for i in range(4)]
    for g in gens:
        torch.rand((), generator=g, dtype=torch.float64)
    eps = torch.stack([torch.randn(x0.shape[1:], generator=g) for g in gens])
    tb = t.view(-1, 1, 1, 1)
    torch.testing.assert_close(x_t, (1 - tb) * x0 + tb * eps)
    assert v.requires_grad and not v_old.requires_grad
    with torch.no_grad():
        torch.testing.assert_close(v, adapter.transformer(x_t, t, ro.cond))
        torch.testing.assert_close(v_old, _Net(-0.4, 0.9)(x_t, t, ro.cond))

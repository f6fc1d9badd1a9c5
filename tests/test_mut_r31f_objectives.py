"""Mutation round 31: GRPO's ratio metrics on a micro-batch with no valid row, NFT's per-bucket norm ratios, and an
NFT objective's state saved before its first update, on round 21's closed-form flow model."""

from __future__ import annotations

import pytest
import torch
from test_mut_r21_objectives import VALID, _setup
from test_mut_r21b_objectives import _nft_t

from imgalign.trainers.config import ObjectiveConfig, SamplingConfig
from imgalign.trainers.nft import NFTConfig
from imgalign.trainers.objectives import GRPOObjective, NFTObjective, TrainContext
from imgalign.trainers.vnorm import sigma_bucket

torch.set_num_threads(1)


def test_a_grpo_micro_batch_without_a_valid_row_logs_ratio_one_not_zero() -> None:
    """Every row masked (a tied prompt group): there is no ratio to average, and the ratio metrics read 1 (on
    policy), as ratio_min and ratio_max do, not 0 (a ratio no policy can have)."""
    adapter, s, ro = _setup({"num_steps": 3})
    ctx = TrainContext(adapter, adapter.transformer, 0)
    loss, m = GRPOObjective(ObjectiveConfig(), s).loss(
        ctx, ro, torch.arange(4), ro.train_steps[0], torch.ones(4), torch.zeros(4, dtype=torch.bool)
    )
    assert float(loss.detach()) == 0.0
    assert (m["policy/ratio_mean"], m["policy/ratio_min"], m["policy/ratio_max"]) == (1.0, 1.0, 1.0)


def test_an_nft_state_saved_before_the_first_update_loads_and_trains_on() -> None:
    """state_dict() of an objective that has not updated yet holds no old policy; loading it sets the update count
    and the next update builds the old policy from the weights (was at risk: a KeyError on 'old')."""
    cfg = ObjectiveConfig(name="nft", nft=NFTConfig(ema_decay_ramp=0.25, ema_decay_max=0.6))
    state = NFTObjective(cfg, SamplingConfig()).state_dict()
    assert state == {"updates": 0}
    fresh = NFTObjective(cfg, SamplingConfig())
    fresh.load_state_dict(state)
    p = torch.nn.Parameter(torch.full((2,), 3.0))
    fresh.after_update([p])  # k = 1: the old policy is built from p
    assert fresh.updates == 1
    assert torch.equal(fresh.old.shadow[0], torch.full((2,), 3.0))


def test_nft_logs_each_buckets_norm_ratio_over_the_valid_rows_whose_sampled_t_falls_in_it(monkeypatch):
    """vnorm_log with t in [0.1, 0.9]: vnorm/norm_ratio/<bucket> is the mean of ||v_theta|| / ||v_ref|| over the
    valid rows whose t is in that bucket (sigma_bucket(t): t is NFT's noise level), not the rows of 1 - t's."""
    adapter, s, ro = _setup({"num_steps": 3})
    cfg = ObjectiveConfig(name="nft", vnorm_log=True, nft=NFTConfig(t_min=0.1, t_max=0.9))
    t, x_t, m = _nft_t(monkeypatch, NFTObjective(cfg, s), adapter, ro, 0, 0)
    with torch.no_grad():
        norm = [net(x_t, t, ro.cond).flatten(1).norm(dim=1) for net in (adapter.transformer, adapter.ref)]
    ratio = norm[0] / norm[1]
    buckets = [sigma_bucket(float(x)) for x in t.tolist()]
    want = {}
    for b in sorted(set(buckets)):
        rows = [r for r in range(4) if buckets[r] == b and bool(VALID[r])]
        if rows:
            want[b] = float(ratio[rows].mean())
    assert {"early", "late"} <= set(want)
    assert abs(want["early"] - want["late"]) > 1e-3
    for b, value in want.items():
        assert m[f"vnorm/norm_ratio/{b}"] == pytest.approx(value, rel=1e-5)

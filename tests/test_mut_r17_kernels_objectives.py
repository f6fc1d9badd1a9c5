"""Mutation round 17 (stop 54): kernels.py and objectives.py behaviour no other test pinned down."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from imgalign.trainers import kernels as K

torch.set_num_threads(1)


def test_sde_step_at_noise_level_zero_samples_the_ode_step_with_log_density_zero():
    """noise_level 0 with neither `noise` nor `prev_sample`: the Euler ODE step x + v·dt (x = 2, v = −1, σ 0.5 ->
    0.25: 2.25), std 0 and log-density 0, as a deterministic step has (not 1, nor a refusal for want of noise)."""
    x, v = torch.full((2, 1, 2, 2), 2.0), torch.full((2, 1, 2, 2), -1.0)
    out = K.flow_sde_step(x, v, 0.5, 0.25, 0.0, 0.9)
    torch.testing.assert_close(out.prev_sample, torch.full_like(x, 2.25))
    assert out.log_prob.tolist() == [0.0, 0.0] and out.std.tolist() == [0.0, 0.0]


def test_a_bfloat16_stored_sample_is_evaluated_in_float32_also_with_block_noise():
    """A stored x' in bf16 (a bf16 rollout's latents): the step returns it as float32 and its block-noise log-density
    is that of the float32 values, the block sums taken in float32 (in bf16 each 2x2 block sum carries ~1e-2
    relative rounding, which moves the summed log-density far beyond a PPO clip range)."""
    g = torch.Generator().manual_seed(11)
    x, v, y = (torch.randn(2, 2, 4, 4, generator=g) for _ in range(3))
    y16 = y.bfloat16()
    out = K.flow_sde_step(x, v, 0.6, 0.4, 0.7, 0.9, prev_sample=y16, block=2)
    ref = K.flow_sde_step(x, v, 0.6, 0.4, 0.7, 0.9, prev_sample=y16.float(), block=2)
    assert torch.equal(out.log_prob, ref.log_prob)
    assert out.prev_sample.dtype == torch.float32


def test_an_unknown_kernel_has_no_score_scale_nor_step_weights():
    """velocity_score_scale / velocity_step_weights of a kernel other than sde / cps raise naming the valid ones
    (objective.step_weight: velocity with a typo would otherwise weight the steps by an arbitrary number)."""
    with pytest.raises(ValueError, match="unknown kernel 'cpss'; valid: sde, cps"):
        K.velocity_score_scale("cpss", 0.5, 0.25, 0.7, 0.9)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown kernel 'ode'"):
        K.velocity_step_weights("ode", [1.0, 0.5, 0.0], [0], 0.7)  # type: ignore[arg-type]


@pytest.mark.parametrize("kernel", ["sde", "cps"])
def test_per_row_sigmas_give_each_row_its_own_step(kernel: str):
    """Tree rollouts step rows at different noise levels in one call (σ [B], σ' [B], one row at σ = 1): each row's
    mean, std and log-density equal those of the row stepped alone with scalar σ, σ' (σ = 1 only uses the
    schedule's next sigma in the SDE's noise scale; no row borrows another row's std or noise scale)."""
    g = torch.Generator().manual_seed(13)
    x, v, y = (torch.randn(3, 2, 2, 2, generator=g) for _ in range(3))
    sig, sig_n = torch.tensor([1.0, 0.6, 0.3]), torch.tensor([0.8, 0.4, 0.1])

    def step(rows: slice, s: torch.Tensor | float, sn: torch.Tensor | float) -> K.StepOutput:
        if kernel == "sde":
            return K.flow_sde_step(x[rows], v[rows], s, sn, 0.7, 0.8, prev_sample=y[rows])
        return K.cps_step(x[rows], v[rows], s, sn, 0.7, prev_sample=y[rows])

    together = step(slice(None), sig, sig_n)
    for k in range(3):
        alone = step(slice(k, k + 1), float(sig[k]), float(sig_n[k]))
        torch.testing.assert_close(together.mean[k : k + 1], alone.mean, msg=f"{kernel} row {k}")
        torch.testing.assert_close(together.std[k : k + 1], alone.std, msg=f"{kernel} row {k}")
        torch.testing.assert_close(together.log_prob[k : k + 1], alone.log_prob, msg=f"{kernel} row {k}")
    assert len(set(together.std.tolist())) == 3


# ---- objectives.py on the tiny SD3 model ----------------------------------------------------------------------------
def _trainer(
    sd3_dir: Path, tmp_path: Path, off_base: bool = False, **sections: dict[str, Any]
) -> tuple[Any, Any, torch.Tensor]:
    """A set-up trainer on the tiny SD3 model (3 sampling steps, 4 samples in groups of 2; `sections` update the
    config's sections) and its first rollout: (trainer, rollout, group ids). `off_base`: the weights are moved off
    the base model (the reference) before the rollout, which stays on-policy."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.testing import first_rollout, one_step_config, write_config
    from imgalign.trainers.trainer import FlowGRPOTrainer

    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg_d = one_step_config(sd3_dir, tmp_path / "run")
    for name, values in sections.items():  # one_step_config has no objective section
        cfg_d.setdefault(name, {}).update(values)
    tr = FlowGRPOTrainer(
        load_config(FlowGRPOConfig, write_config(cfg_d, tmp_path / "c.yaml")), tmp_path / "run"
    )
    tr.setup()
    if off_base:
        _nudge_off_base(tr.model)
    return (tr, *first_rollout(tr))


def _nudge_off_base(model: torch.nn.Module, seed: int = 0) -> None:
    """Add N(0, 0.02²) seeded noise to every weight: the policy leaves the base model (KL > 0, ratio ≠ 1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=g).to(p))


def test_grpo_off_policy_metrics_use_the_configured_clip_range_and_the_valid_rows(sd3_dir, tmp_path):
    """Stored log-densities moved by −0.5, +0.5, 0, +3 (ratios e^0.5, e^−0.5, 1, e^−3), row 3 masked: ratio_min /
    ratio_max / ratio_mean are those of rows 0-2, clipfrac (objective.clip_range 0.2: rows 0 and 1 outside) 2/3 and the
    loss the clipped surrogate hand-computed; the logged KL to the base is the valid rows' mean of the per-row KLs."""
    from imgalign.trainers.objectives import TrainContext

    tr, ro, _ = _trainer(
        sd3_dir,
        tmp_path,
        off_base=True,
        sampling={"sde_window": 1, "sde_window_max_start": 0},
        objective={"clip_range": 0.2, "kl_beta": 0.1},
    )
    assert ro.train_steps == [0]
    ctx = TrainContext(tr.adapter, tr.model, 0)
    idx, adv = torch.arange(4), torch.tensor([1.0, -1.0, 0.5, 2.0])
    ones = torch.ones(4, dtype=torch.bool)
    per_row = [tr.objective.loss(ctx, ro, idx, 0, adv, ones)[1]]  # every row: the on-policy ratios
    kls = [tr.objective.loss(ctx, ro, torch.tensor([k]), 0, adv, ones)[1]["policy/kl"] for k in range(4)]
    ratio0 = [per_row[0]["policy/ratio_min"], per_row[0]["policy/ratio_max"]]
    assert ratio0 == pytest.approx([1.0, 1.0], abs=1e-4) and min(kls) > 0
    kl_valid = sum(kls[:3]) / 3
    assert abs(kl_valid - sum(kls) / 4) > 2e-3 * kl_valid  # row 3's KL moves the mean: the mask shows
    shift = torch.tensor([-0.5, 0.5, 0.0, 3.0], dtype=ro.log_probs.dtype)
    ro.log_probs[:, 0] += shift
    valid = torch.tensor([True, True, True, False])
    loss, m = tr.objective.loss(ctx, ro, idx, 0, adv, valid)
    lo, hi = math.exp(-0.5), math.exp(0.5)
    assert m["policy/ratio_min"] == pytest.approx(lo, rel=1e-4)
    assert m["policy/ratio_max"] == pytest.approx(hi, rel=1e-4)
    assert m["policy/ratio_mean"] == pytest.approx((lo + hi + 1) / 3, rel=1e-4)
    assert m["policy/clipfrac"] == pytest.approx(2 / 3, rel=1e-6)
    # max(−A·ρ, −A·clip(ρ, 0.8, 1.2)): row 0 (A 1, ρ e^0.5) −1.2; row 1 (A −1, ρ e^−0.5) 0.8; row 2 −0.5
    surrogate = (-1.2 + 0.8 - 0.5) / 3
    assert m["policy/kl"] == pytest.approx(kl_valid, rel=1e-4)
    assert float(loss.detach()) == pytest.approx(surrogate + 0.1 * kl_valid, rel=1e-4)


def test_the_logged_norm_ratio_of_a_zero_reference_velocity_is_finite():
    """add_penalty's logged ‖v_θ‖/‖v_ref‖ divides by the reference norm floored at 1e-12: a sample whose reference
    velocity is exactly 0 logs a large finite ratio, not inf (nor NaN for 0/0)."""
    from imgalign.trainers.config import ObjectiveConfig
    from imgalign.trainers.objectives import add_penalty

    v = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
    v_ref = torch.zeros(2, 2)
    metrics: dict[str, Any] = {}
    loss = add_penalty(ObjectiveConfig(), torch.zeros(()), v, v_ref, torch.tensor([1.0, 0.0]), metrics)
    assert float(loss) == 0.0 and metrics["policy/vnorm_ratio"] == pytest.approx(5e12, rel=1e-6)
    add_penalty(ObjectiveConfig(), torch.zeros(()), v, v_ref, torch.tensor([0.0, 1.0]), metrics)
    assert metrics["policy/vnorm_ratio"] == 0.0


def test_the_logged_norm_ratio_of_bf16_velocities_is_taken_in_float32():
    """add_penalty took the logged ‖v_θ‖/‖v_ref‖ of a bf16 model's velocities in bf16 (each norm rounded to 8
    bits: the ratio off by up to ~0.4%); it is taken in float32 from the same bf16 values, as vnorm.norm_ratio
    takes it."""
    from imgalign.trainers.config import ObjectiveConfig
    from imgalign.trainers.objectives import add_penalty

    g = torch.Generator().manual_seed(3)
    v, v_ref = (torch.randn(4, 4096, generator=g).bfloat16() for _ in range(2))
    metrics: dict[str, Any] = {}
    add_penalty(ObjectiveConfig(), torch.zeros(()), v, v_ref, torch.ones(4), metrics, ["early"] * 4)
    want = float((v.double().norm(dim=1) / v_ref.double().norm(dim=1)).mean())
    assert metrics["policy/vnorm_ratio"] == pytest.approx(want, rel=1e-6)
    assert metrics["vnorm/norm_ratio/early"] == pytest.approx(want, rel=1e-6)


def test_a_plugin_penalty_of_one_value_for_all_or_of_shape_b_by_1_trains(monkeypatch):
    """A velocity penalty may return one value for the whole micro-batch (a scalar) or one per sample as [b, 1]: the
    loss gains λ·that value, resp. λ·the valid rows' mean (rows 4 and 1 of 4, 9 masked: 2.5), not a refusal nor a
    [b, b] broadcast."""
    import sys
    import types

    from imgalign.trainers.config import ObjectiveConfig
    from imgalign.trainers.objectives import add_penalty

    mod = types.ModuleType("my_lab_pen_r17")
    mod.batch_mean = lambda v, v_ref: ((v - v_ref) ** 2).sum(1).mean()
    mod.column = lambda v, v_ref: ((v - v_ref) ** 2).sum(1, keepdim=True)
    monkeypatch.setitem(sys.modules, "my_lab_pen_r17", mod)
    v = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0]], requires_grad=True)
    v_ref, w = torch.zeros(3, 2), torch.tensor([1.0, 1.0, 0.0])
    m: dict[str, Any] = {}
    cfg = ObjectiveConfig(penalty="my_lab_pen_r17:batch_mean", penalty_weight=0.5)
    assert float(add_penalty(cfg, torch.zeros(()), v, v_ref, w, m).detach()) == pytest.approx(0.5 * 14 / 3)
    cfg = ObjectiveConfig(penalty="my_lab_pen_r17:column", penalty_weight=0.5)
    assert float(add_penalty(cfg, torch.zeros(()), v, v_ref, w, m).detach()) == pytest.approx(0.5 * 2.5)
    assert m["policy/penalty"] == pytest.approx(2.5)


def test_check_loss_takes_one_element_tensor_metrics_as_numbers_and_refuses_booleans():
    """check_loss: a one-element tensor metric is read as a float; a bool metric (a flag, not a mean over samples)
    is refused like any non-number, and so are a 3-tuple and metrics that are not a dict."""
    from imgalign.trainers.objectives import check_loss

    loss = torch.ones((), requires_grad=True) * 2
    out, metrics = check_loss("mine", (loss, {"my/a": torch.tensor([0.5]), "my/b": 3}))
    assert out is loss and metrics == {"my/a": 0.5, "my/b": 3.0}
    assert all(type(v) is float for v in metrics.values())
    with pytest.raises(ValueError, match="returned metric 'my/flag' as a bool; metrics must be numbers"):
        check_loss("mine", (loss, {"my/flag": True}))
    with pytest.raises(ValueError, match="returned a tuple; it must return \\(loss, metrics\\)"):
        check_loss("mine", (loss, {}, {}))
    with pytest.raises(ValueError, match="returned metrics as a list, not a dict"):
        check_loss("mine", (loss, [("my/a", 1.0)]))


def test_a_train_mask_leaves_a_row_out_of_the_step_it_masks_only(sd3_dir, tmp_path):
    """Rollout.train_mask [B, S]: row 1 masked at trained step 1 only is out of step 1's loss (as valid False would
    leave it out) and in step 0's."""
    from imgalign.trainers.objectives import TrainContext

    tr, ro, _ = _trainer(sd3_dir, tmp_path, sampling={"sde_window": 2})
    assert ro.train_steps == [0, 1]
    ctx = TrainContext(tr.adapter, tr.model, 0)
    idx, adv = torch.arange(4), torch.tensor([1.0, 0.5, 0.2, -0.1])
    ones = torch.ones(4, dtype=torch.bool)
    no_row_1 = torch.tensor([True, False, True, True])
    by_valid = [float(tr.objective.loss(ctx, ro, idx, i, adv, no_row_1)[0].detach()) for i in (0, 1)]
    assert by_valid == pytest.approx(
        [-(1.0 + 0.2 - 0.1) / 3] * 2, rel=1e-4
    )  # on-policy: −mean(A) of the rest
    ro.train_mask = torch.ones(4, ro.log_probs.shape[1], dtype=torch.bool)
    ro.train_mask[1, 1] = False
    by_mask = [float(tr.objective.loss(ctx, ro, idx, i, adv, ones)[0].detach()) for i in (0, 1)]
    assert by_mask == pytest.approx([-0.4, by_valid[1]], rel=1e-4)


def test_nft_builds_its_implicit_policies_with_the_configured_beta(sd3_dir, tmp_path, monkeypatch):
    """objective.nft.beta is the guidance strength of v± = v_old ± β·(v_θ − v_old) inside the loss terms, not only
    the loss's divisor: the head hands it to nft_loss_terms (at β = 1 the two are indistinguishable, and at
    initialisation v_θ = v_old hides any β)."""
    from imgalign.trainers import nft
    from imgalign.trainers.objectives import TrainContext

    seen: list[float] = []
    terms = nft.nft_loss_terms

    def spy(v, v_old, x0, x_t, t, beta, *rest):
        seen.append(beta)
        return terms(v, v_old, x0, x_t, t, beta, *rest)

    monkeypatch.setattr(nft, "nft_loss_terms", spy)
    tr, ro, _ = _trainer(sd3_dir, tmp_path, objective={"name": "nft", "nft": {"beta": 0.5}})
    valid = torch.ones(4, dtype=torch.bool)
    tr.objective.head(TrainContext(tr.adapter, tr.model, 0), ro, torch.arange(4), 0, valid)
    assert seen == [0.5]

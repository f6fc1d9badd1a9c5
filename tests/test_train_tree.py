"""`imgalign train` with tree rollouts (sampling.rollout: tree) on a tiny random SD3 pipeline: a 2-step smoke run
(every trainable parameter changes, NFE and credit metrics logged, the velocity-norm hinge and KL compose), the
importance ratio is exactly 1 on-policy for every tree edge, the rollout's NFE equals the formula (CFG x2) and
the transformer rows actually evaluated, config errors fail before any model loads, and a resumed tree run equals
an uninterrupted one."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from imgalign.cli import main
from imgalign.trainers.testing import metric_rows as rows
from imgalign.trainers.testing import transformer_weights as initial_trainable
from imgalign.trainers.testing import write_config as write

torch.set_num_threads(1)


def tree_config(model: Path, out: Path, prompts: Path) -> dict:
    """2 prompts x 4 leaves, 4 steps, binary branches at steps 0 and 2: NFE per tree 1 + 2 + 2 + 4 = 9."""
    return {
        "model": {"path": str(model)},
        "prompts": {"source": str(prompts), "test_fraction": 0.3},
        "sampling": {
            "num_steps": 4,
            "group_size": 4,
            "samples_per_step": 8,
            "batch_size": 8,
            "rollout": "tree",
            "tree": {"branch_steps": [0, 2], "branch_factors": [2]},
        },
        "rewards": {"names": ["imgalign.trainers.testing:red_reward"]},
        "objective": {"clip_range": 0.2},
        "train": {"max_steps": 2, "lr": 1e-3, "micro_batch_size": 4, "updates_per_step": 1},
        "eval": {"every": -1},
        "log": {"output_dir": str(out), "sample_every": 0, "trackers": "none", "progress": False},
    }


@pytest.fixture
def prompts(tmp_path):
    p = tmp_path / "prompts.txt"
    p.write_text("".join(f"a photo of {n} cats\n" for n in ("one", "two", "three", "four", "five", "six")))
    return p


def test_tree_grpo_two_steps(sd3_dir, prompts, tmp_path):
    out = tmp_path / "run"
    cfg = tree_config(sd3_dir, out, prompts)
    cfg["objective"].update(kl_beta=0.01, penalty="vnorm", penalty_weight=0.1)  # KL and the hinge compose
    cfg["eval"] = {"every": 0, "suite": "reward", "images_per_prompt": 1, "num_steps": 3, "vnorm_images": 2}
    assert main(["train", str(write(cfg, tmp_path / "c.yaml"))]) == 0
    r = rows(out)
    assert [x["step"] for x in r] == [1, 2]
    for key in (
        "reward/red_reward/mean",
        "policy/approx_kl",
        "policy/kl",
        "policy/penalty",
        "vnorm/norm_ratio/early",
        "vnorm/norm_ratio/middle",
        "perf/nfe",
        "perf/rollout_nfe",
        "perf/nfe_per_leaf",
        "perf/flat_nfe_same_leaves",
        "tree/trained_edges",
        "tree/edge_adv_abs_mean",
        "train/grad_norm",
    ):
        assert key in r[0] and r[0][key] == r[0][key], key
    # exact NFE: a shared prefix counts once (2 trees x 9), against 8 samples x 4 steps for flat rollouts
    assert r[0]["perf/nfe"] == r[0]["perf/rollout_nfe"] == 18 and r[0]["perf/flat_nfe_same_leaves"] == 32
    assert r[0]["tree/trained_edges"] == 2 * (2 + 4) and r[0]["tree/parent_rows"] == 2 * (1 + 2)
    # v_theta once per parent row, not once per edge, and the frozen reference (KL, hinge) once per parent row too
    assert r[0]["perf/nfe_train"] == 6 + 6
    assert abs(r[0]["policy/ratio_mean"] - 1) < 1e-4 and r[0]["policy/clipfrac"] == 0
    assert r[0]["policy/kl"] < 1e-8 and r[1]["policy/kl"] > 0
    assert r[0]["vnorm/norm_ratio/early"] == pytest.approx(1.0, abs=1e-5) and r[0]["policy/penalty"] == 0.0
    # the final evaluation measures the inflation against the frozen base per bucket
    assert {"eval/vnorm/norm_ratio/early", "eval/vnorm/norm_ratio/late"} <= r[1].keys()
    assert r[1]["eval/vnorm/norm_ratio/all"] != 1.0
    ckpt = out / "checkpoints" / "step-000002" / "trainer_state" / "trainable.safetensors"
    raw = load_file(str(ckpt))
    init = initial_trainable(sd3_dir)
    unchanged = [n for n, t in raw.items() if torch.equal(t, init[n])]
    assert not unchanged, f"parameters that did not change: {unchanged[:5]}"


def test_the_batch_layout_counts_a_trees_nfe_with_cfg_as_the_metrics_do(sd3_dir, prompts, tmp_path, caplog):
    """The start-up `batch layout` line gave a tree's NFE without CFG (9) while perf/rollout_nfe counted CFG twice
    (2 trees x 18): the layout's number now counts CFG as the issue asks and the metrics do."""
    out = tmp_path / "run"
    cfg = tree_config(sd3_dir, out, prompts)
    cfg["sampling"]["guidance_scale"] = 3.0
    cfg["train"]["max_steps"] = 1
    with caplog.at_level(logging.INFO, logger="imgalign.trainers.trainer"):
        assert main(["train", str(write(cfg, tmp_path / "c.yaml"))]) == 0
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("batch layout: "))
    layout = json.loads(line.removeprefix("batch layout: "))
    assert layout["tree_rollout_nfe_per_tree"] == 18
    assert rows(out)[0]["perf/rollout_nfe"] == 2 * 18 == rows(out)[0]["perf/nfe"]


PROMPTS = ("a red circle", "two blue squares")  # the two trees of _roll, one per prompt


def _setup(sd3_dir, guidance: float, group_size: int = 4, **tree):
    from imgalign.adapters import load_adapter
    from imgalign.trainers.testing import tree_sampling

    return load_adapter(sd3_dir), tree_sampling(group_size, guidance, **tree)


def _roll(a, s, step: int = 0, reduce: str = "sum"):
    from imgalign.trainers.rollout import ROLLOUTS, RolloutContext

    g = s.group_size
    prompts = [p for p in PROMPTS for _ in range(g)]
    ctx = RolloutContext(a, a.transformer, s, seed=3, step=step, logprob_reduce=reduce)
    with torch.no_grad():
        return ROLLOUTS.get("tree")(ctx, prompts, [{}] * 2 * g, torch.arange(2 * g), torch.arange(2 * g) // g)


def _credited_tree(sd3_dir, guidance: float = 1.0):
    """A fully fine-tunable adapter with its reference, one sibling-credit tree rollout of two binary branch steps,
    and its (advantages, valid) for leaf rewards spread over [-1, 1]: (adapter, sampling config, rollout, adv,
    valid)."""
    from imgalign.trainers.rewarding import Balanced

    a, s = _setup(sd3_dir, guidance, branch_steps=[0, 2], branch_factors=[2], advantage="sibling")
    a.enable_full_finetune(keep_reference=True)
    ro = _roll(a, s)
    adv, valid = ro.extras["credit"](
        torch.zeros(1, 8), Balanced(torch.linspace(-1, 1, 8), torch.ones(8, dtype=torch.bool), 0.0)
    )
    return a, s, ro, adv, valid


@pytest.mark.parametrize("between", ["ode", "sde"])
def test_tree_edges_ratio_one_on_policy(sd3_dir, between):
    from imgalign.trainers.config import ObjectiveConfig
    from imgalign.trainers.objectives import GRPOObjective, TrainContext
    from imgalign.trainers.rewarding import Balanced

    a, s = _setup(sd3_dir, 1.0, branch_steps=[0, 2], branch_factors=[2], between=between, advantage="sibling")
    a.enable_full_finetune(keep_reference=False)
    ro = _roll(a, s)
    rows_ = ro.extras["tree"]
    assert ro.num_rows == rows_.x.shape[0] == 2 * 3 and rows_.child_mask.all()
    bal = Balanced(torch.linspace(-1, 1, 8), torch.ones(8, dtype=torch.bool), 0.0)
    adv, valid = ro.extras["credit"](torch.zeros(1, 8), bal)
    assert adv.shape == valid.shape == (6, 2) and valid.all()
    # sibling mode with k = 2: every pair of children is +-1 (or 0 on a tie)
    assert (
        torch.allclose(adv.abs().sum(1), torch.full((6,), 2.0), atol=5e-3) and (adv.sum(1).abs() < 1e-5).all()
    )
    obj = GRPOObjective(ObjectiveConfig(clip_range=0.2), s)
    ctx = TrainContext(a, a.transformer, 0)
    for idx in (torch.arange(6), torch.tensor([4, 1])):  # any micro-batch of parent rows
        loss, m = obj.loss(ctx, ro, idx, obj.terms(ro)[0], adv, valid)
        assert m["policy/ratio_min"] == pytest.approx(1.0, abs=1e-4), m
        assert m["policy/ratio_max"] == pytest.approx(1.0, abs=1e-4), m
        loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in a.transformer.parameters())
    # off-policy (weights moved after sampling): each edge's ratio is exp(log π_θ(child) − the stored behaviour one)
    from imgalign.trainers import kernels as K
    from imgalign.trainers.rollout import kernel_mean_std

    with torch.no_grad():
        a.transformer.proj_out.weight.mul_(1.5)
        a.transformer.proj_out.bias.mul_(1.5)
        v = a.velocity(rows_.x, rows_.sigma, rows_.cond, 1.0, transformer=a.transformer)
        mean = kernel_mean_std(
            s.kernel, rows_.x, v, rows_.sigma, rows_.sigma_next, s.noise_level, rows_.sigma_next_of_one
        )[0]
        lp = K.gaussian_log_prob(
            rows_.children.flatten(0, 1), mean.repeat_interleave(2, 0), rows_.std.repeat_interleave(2)
        )
        ratio = torch.exp(lp.double() - rows_.old_log_prob.flatten())
        _, m = obj.loss(ctx, ro, torch.arange(6), obj.terms(ro)[0], adv, valid)
    assert float((ratio - 1).abs().max()) > 1e-2
    assert m["policy/ratio_max"] == pytest.approx(float(ratio.max()), rel=1e-4)
    assert m["policy/ratio_min"] == pytest.approx(float(ratio.min()), rel=1e-4)


def test_tree_credit_masks_edges_without_a_valid_leaf_and_trees_resample_every_step(sd3_dir):
    """Leaves 0 and 1 (the two children of one step-2 parent) masked by the balancer: their two edges and the
    root edge above them have no valid leaf below and are masked, the other 9 edges train. A tree's noise is seeded
    by the training step too: step 1 grows other leaves than step 0."""
    from imgalign.trainers.rewarding import Balanced

    a, s = _setup(sd3_dir, 1.0, branch_steps=[0, 2], branch_factors=[2], advantage="sibling")
    ro = _roll(a, s)
    leaf_valid = torch.ones(8, dtype=torch.bool)
    leaf_valid[:2] = False
    adv, valid = ro.extras["credit"](torch.zeros(1, 8), Balanced(torch.linspace(-1, 1, 8), leaf_valid, 0.0))
    assert int(valid.sum()) == 12 - 3
    assert (adv[~valid] == 0).all()
    m = ro.extras["metrics"]
    assert m["tree/edge_valid_ratio"] == pytest.approx(9 / 12)
    assert m["tree/edge_adv_abs_mean"] == pytest.approx(float(adv[valid].abs().mean()), rel=1e-5)
    # the behaviour log-densities follow objective.logprob_reduce: the mean is the sum over the latent size
    mean_ro = _roll(a, s, reduce="mean")
    rows_, mean_rows = ro.extras["tree"], mean_ro.extras["tree"]
    d = rows_.children[0, 0].numel()
    torch.testing.assert_close(mean_rows.old_log_prob, rows_.old_log_prob / d)
    assert not torch.allclose(_roll(a, s, step=1).x0, ro.x0)


def test_tree_credit_pads_uneven_branching_with_zero_advantage_and_invalid_slots(sd3_dir):
    """Branch factors 2 then 3 (6 leaves per tree): the step-0 rows have 2 children in k = 3 slots, the third is
    padding with advantage 0 and never valid. Sibling credit by hand, leaf signals (-1, 0, 1, 1, 2, 3) per tree:
    the step-2 children are (-1, 0, 1) - mean over the population std sqrt(2/3), the step-0 children (values 0 and
    2) are -1 and +1."""
    from imgalign.trainers.rewarding import Balanced

    a, s = _setup(sd3_dir, 1.0, group_size=6, branch_steps=[0, 2], branch_factors=[2, 3], advantage="sibling")
    ro = _roll(a, s)
    rows_ = ro.extras["tree"]
    signal = torch.tensor([-1.0, 0.0, 1.0, 1.0, 2.0, 3.0]).repeat(2)
    adv, valid = ro.extras["credit"](
        torch.zeros(1, 12), Balanced(signal, torch.ones(12, dtype=torch.bool), 0.0)
    )
    # parent rows by branch step, tree-major within one: the two roots, then tree 0's and tree 1's step-2 nodes
    assert rows_.step.tolist() == [0, 0, 2, 2, 2, 2]
    c = 1 / ((2 / 3) ** 0.5 + 1e-4)
    e = 1 / (1 + 1e-4)
    expected = torch.tensor([[-e, e, 0.0]] * 2 + [[-c, 0.0, c]] * 4)
    pad = torch.tensor([[False, False, True]] * 2 + [[False] * 3] * 4)
    assert torch.equal(rows_.child_mask, ~pad)
    torch.testing.assert_close(adv, expected, rtol=1e-5, atol=1e-6)
    assert torch.equal(valid, ~pad)
    assert ro.extras["metrics"]["tree/edge_valid_ratio"] == 1.0  # over the 10 edges, not the 12 padded slots
    assert ro.extras["metrics"]["tree/first_branch_step"] == 0.0 and ro.train_steps == [0, 2]


def test_tree_credit_follows_the_configured_value_temperature_eps_and_clip(sd3_dir):
    """sampling.tree.value/value_temperature/adv_eps/adv_clip reach the credit. TreeGRPO credit by hand, leaf
    signals (-1, 0, 1, 3) per tree, adv_eps 0.5, adv_clip 1: the leaves are z = (s - 0.75)/(std + 0.5) clipped to
    +-1 (the step-2 edges); with log-prob values at temperature 1e-6 a step-0 edge takes the z of its likelier
    child (the softmax over siblings is one-hot), not the mean of the two."""
    from imgalign.trainers.rewarding import Balanced

    a, s = _setup(
        sd3_dir,
        1.0,
        branch_steps=[0, 2],
        branch_factors=[2],
        advantage="tree",
        value="logprob",
        value_temperature=1e-6,
        adv_eps=0.5,
        adv_clip=1.0,
    )
    ro = _roll(a, s)
    rows_ = ro.extras["tree"]
    sig = torch.tensor([-1.0, 0.0, 1.0, 3.0])
    adv, valid = ro.extras["credit"](
        torch.zeros(1, 8), Balanced(sig.repeat(2), torch.ones(8, dtype=torch.bool), 0.0)
    )
    z = ((sig - sig.mean()) / (sig.std(unbiased=False) + 0.5)).clamp(-1.0, 1.0)
    assert z[0] == pytest.approx(-1.75 / (2.1875**0.5 + 0.5)) and z[3] == 1.0  # unclipped 2.25 / 1.979
    assert rows_.step.tolist() == [0, 0, 2, 2, 2, 2] and valid.all()
    d = rows_.children[0, 0].numel()
    expected = torch.zeros(6, 2)
    for t in range(2):  # tree t: root row t, its step-2 rows 2 + 2t + j hold leaves 2j, 2j + 1
        for j in range(2):
            lp = rows_.old_log_prob[2 + 2 * t + j] / d
            assert (lp[0] - lp[1]).abs() > 1e-3  # a clear likelier child
            expected[2 + 2 * t + j] = z[2 * j : 2 * j + 2]
            expected[t, j] = z[2 * j + int(lp.argmax())]
    torch.testing.assert_close(adv, expected, rtol=1e-5, atol=1e-6)


def test_tree_rollout_samples_at_the_configured_noise_level(sd3_dir):
    """sampling.noise_level reaches the tree's SDE steps: the Flow-GRPO std is linear in it, so the recorded
    stds at 0.3 are 3/7 of those at the default 0.7."""
    a, s = _setup(sd3_dir, 1.0, branch_steps=[0, 2], branch_factors=[2])
    ref = _roll(a, s).extras["tree"]
    assert s.noise_level == 0.7
    s.noise_level = 0.3
    low = _roll(a, s).extras["tree"]
    torch.testing.assert_close(low.std, ref.std * (0.3 / 0.7))


def test_tree_credit_reads_the_leaves_by_their_global_sample_ids(sd3_dir):
    """On the second of two processes the trees' leaves are samples 8..15 of the step: the credit reads their leaf
    signals at those ids in the gathered [16] advantages, not the first 8."""
    from imgalign.trainers.rewarding import Balanced
    from imgalign.trainers.rollout import ROLLOUTS, RolloutContext

    a, s = _setup(sd3_dir, 1.0, branch_steps=[0, 2], branch_factors=[2], advantage="sibling")
    ctx = RolloutContext(a, a.transformer, s, seed=3, step=0, logprob_reduce="sum")
    prompts = [p for p in PROMPTS for _ in range(4)]
    with torch.no_grad():
        ro = ROLLOUTS.get("tree")(ctx, prompts, [{}] * 8, torch.arange(8, 16), torch.arange(8) // 4 + 2)
    signal = torch.tensor([-1.0, 0.0, 1.0, 1.0, 2.0, 3.0, 0.0, 5.0])
    ok = torch.ones(16, dtype=torch.bool)
    adv, valid = ro.extras["credit"](
        torch.zeros(1, 16), Balanced(torch.cat([signal.flip(0), signal]), ok, 0.0)
    )
    ref, _ = ro.extras["credit"](torch.zeros(1, 16), Balanced(torch.cat([signal, signal]), ok, 0.0))
    torch.testing.assert_close(adv, ref)
    assert valid.all() and not torch.equal(adv, torch.zeros_like(adv))


def test_tree_credit_reads_leaf_validity_by_the_global_sample_ids(sd3_dir):
    """On the second process (leaves = samples 8..15) the balancer's valid mask is read at those ids too: masking
    samples 0 and 1 (another process's leaves) masks nothing here; masking 8 and 9 (the two children of this
    process's first step-2 parent) masks their 2 edges and the root edge above them."""
    from imgalign.trainers.rewarding import Balanced
    from imgalign.trainers.rollout import ROLLOUTS, RolloutContext

    a, s = _setup(sd3_dir, 1.0, branch_steps=[0, 2], branch_factors=[2], advantage="sibling")
    ctx = RolloutContext(a, a.transformer, s, seed=3, step=0, logprob_reduce="sum")
    prompts = [p for p in PROMPTS for _ in range(4)]
    with torch.no_grad():
        ro = ROLLOUTS.get("tree")(ctx, prompts, [{}] * 8, torch.arange(8, 16), torch.arange(8) // 4 + 2)
    signal = torch.linspace(-1, 1, 16)
    for masked, n_valid in (((0, 1), 12), ((8, 9), 12 - 3)):
        ok = torch.ones(16, dtype=torch.bool)
        ok[list(masked)] = False
        _, valid = ro.extras["credit"](torch.zeros(1, 16), Balanced(signal, ok, 0.0))
        assert int(valid.sum()) == n_valid, masked


def test_a_tree_is_the_same_whichever_process_grows_it(sd3_dir):
    """A tree's noise is seeded by its global group id: the second prompt's tree grown alone (as on a second
    process, group id 1, samples 4..7) equals the second tree of the rollout that grows both prompts."""
    from imgalign.trainers.rollout import ROLLOUTS, RolloutContext

    a, s = _setup(sd3_dir, 1.0, branch_steps=[0, 2], branch_factors=[2])
    both = _roll(a, s)
    ctx = RolloutContext(a, a.transformer, s, seed=3, step=0, logprob_reduce="sum")
    with torch.no_grad():
        alone = ROLLOUTS.get("tree")(
            ctx, [PROMPTS[1]] * 4, [{}] * 4, torch.arange(4, 8), torch.ones(4, dtype=torch.long)
        )
    torch.testing.assert_close(alone.x0, both.x0[4:], rtol=1e-4, atol=1e-5)


def test_tree_credit_masks_edges_a_non_finite_leaf_signal_reaches(sd3_dir):
    """A balancer that leaves NaN at a masked leaf (leaf 0): the NaN never reaches the loss. Leaf 0's edge has no
    valid leaf below it, and its sibling's (leaf 1) sibling-normalised advantage is NaN, so both are masked with
    advantage 0; the other 10 edges (the root edges see leaf 1's value only) train."""
    from imgalign.trainers.rewarding import Balanced

    a, s = _setup(sd3_dir, 1.0, branch_steps=[0, 2], branch_factors=[2], advantage="sibling")
    ro = _roll(a, s)
    signal = torch.linspace(-1, 1, 8)
    signal[0] = float("nan")
    ok = torch.ones(8, dtype=torch.bool)
    ok[0] = False
    adv, valid = ro.extras["credit"](torch.zeros(1, 8), Balanced(signal, ok, 0.0))
    assert torch.isfinite(adv).all() and int(valid.sum()) == 12 - 2
    assert (adv[~valid] == 0).all() and ro.extras["metrics"]["tree/edge_valid_ratio"] == pytest.approx(
        10 / 12
    )


def test_tree_children_are_the_mean_plus_std_times_unit_noise_and_between_sde_reaches_the_rollout(sd3_dir):
    """Each child is mu + std·eps with eps ~ N(0, I): its summed behaviour log-density gives the mean squared eps
    over the D latent dims, -2·(lp/D + log std + log(2π)/2), which must be about 1 for every edge. The configured
    sampling.tree.between reaches the rollout: with sde the non-branch steps are noisy, so the first branch (step 0)
    is shared but the leaves differ."""
    import math

    a, s = _setup(sd3_dir, 1.0, branch_steps=[0, 2], branch_factors=[2], between="ode")
    ro = _roll(a, s)
    rows_ = ro.extras["tree"]
    d = rows_.children[0, 0].numel()
    eps2 = -2 * (rows_.old_log_prob / d + rows_.std.double().log()[:, None] + 0.5 * math.log(2 * math.pi))
    assert d >= 64 and ((eps2 - 1).abs() < 0.5).all(), eps2
    s.tree.between = "sde"
    sde = _roll(a, s)
    torch.testing.assert_close(sde.extras["tree"].x[:2], rows_.x[:2])
    assert not torch.allclose(sde.x0, ro.x0)


def test_tree_rollout_steps_between_branches_by_euler_and_samples_with_the_cps_kernel(sd3_dir):
    """Between branches (step 1 of branch steps 0 and 2) a node takes the Euler step x + v·(sigma_2 - sigma_1)
    from its step-0 child to its step-2 parent row. With sampling.kernel=cps every branch samples and records
    the CPS step's std, sigma_next·sin(a·pi/2), and mean."""
    import math

    from imgalign.trainers import kernels as K

    a, s = _setup(sd3_dir, 1.0, branch_steps=[0, 2], branch_factors=[2])
    rows_ = _roll(a, s).extras["tree"]
    x1 = rows_.children[:2].flatten(0, 1)  # [4, ...] tree 0's two step-0 children, then tree 1's
    with torch.no_grad():
        v = a.velocity(
            x1,
            rows_.sigma_next[:2].repeat_interleave(2),
            rows_.cond.index(torch.tensor([0, 0, 1, 1])),
            1.0,
            transformer=a.transformer,
        )
    dt = rows_.sigma[2:] - rows_.sigma_next[:2].repeat_interleave(2)
    assert (dt < 0).all()
    torch.testing.assert_close(rows_.x[2:], x1 + v * dt[:, None, None, None], rtol=1e-4, atol=1e-5)
    s.kernel = "cps"
    cps = _roll(a, s).extras["tree"]
    torch.testing.assert_close(cps.std, cps.sigma_next * math.sin(s.noise_level * math.pi / 2))
    with torch.no_grad():
        v = a.velocity(cps.x, cps.sigma, cps.cond, 1.0, transformer=a.transformer)
    mean, _ = K.cps_mean_std(cps.x, v, cps.sigma, cps.sigma_next, s.noise_level)
    lp = K.gaussian_log_prob(
        cps.children.flatten(0, 1), mean.repeat_interleave(2, 0), cps.std.repeat_interleave(2)
    )
    torch.testing.assert_close(lp.double(), cps.old_log_prob.flatten(), rtol=1e-4, atol=1e-2)


def test_tree_rollout_conditions_every_leaf_on_its_own_prompt(sd3_dir):
    """Rollout.cond has one row per leaf (tree-major: the G leaves of prompt 0, then of prompt 1), each its own
    prompt's conditioning; every parent row carries its tree's prompt."""
    a, s = _setup(sd3_dir, 1.0, branch_steps=[0, 2], branch_factors=[2])
    ro = _roll(a, s)
    with torch.no_grad():
        enc = a.encode(list(PROMPTS))
    assert not torch.allclose(enc.embeds[0], enc.embeds[1])  # the two prompts are told apart
    leaf_prompt = torch.arange(8) // 4
    torch.testing.assert_close(ro.cond.embeds, enc.embeds[leaf_prompt])
    torch.testing.assert_close(ro.cond.pooled, enc.pooled[leaf_prompt])
    rows_ = ro.extras["tree"]
    assert rows_.step.tolist() == [0, 0, 2, 2, 2, 2]  # the two roots, then tree 0's and tree 1's step-2 nodes
    torch.testing.assert_close(rows_.cond.embeds, enc.embeds[torch.tensor([0, 1, 0, 0, 1, 1])])


def test_tree_rollout_rejects_groups_that_are_not_whole_trees(sd3_dir):
    """Every group must be one tree on one process: interleaved group ids (the right count, but not contiguous
    runs of group_size), and a tree spec whose leaf count is not group_size (a config that skipped validate),
    are errors rather than trees silently built from the wrong samples."""
    from imgalign.trainers.rollout import ROLLOUTS, RolloutContext
    from imgalign.trainers.tree import TreeConfig

    a, s = _setup(sd3_dir, 1.0, branch_steps=[0, 2], branch_factors=[2])
    ctx = RolloutContext(a, a.transformer, s, seed=3, step=0, logprob_reduce="sum")
    prompts = [p for p in PROMPTS for _ in range(4)]
    roll = ROLLOUTS.get("tree")
    with torch.no_grad():
        with pytest.raises(ValueError, match="not whole groups"):
            roll(ctx, prompts, [{}] * 8, torch.arange(8), torch.arange(8) % 2)
        with pytest.raises(ValueError, match="not whole groups"):
            roll(ctx, prompts[:6], [{}] * 6, torch.arange(6), torch.arange(6) // 4)
        s.tree = TreeConfig(branch_steps=[0, 2], branch_factors=[2, 4])  # 8 leaves, group_size 4
        with pytest.raises(ValueError, match="8 leaves per tree but group_size=4"):
            roll(ctx, prompts, [{}] * 8, torch.arange(8), torch.arange(8) // 4)


def test_tree_loss_adds_kl_beta_times_the_kl_and_penalty_weight_times_the_hinge(sd3_dir):
    """Off the base (the output layer scaled by 1.5: v_θ = 1.5·v_ref), the tree GRPO loss is the surrogate + β·KL +
    λ·hinge, both means over the parent rows with a valid edge: KL = ‖μ_θ − μ_ref‖²/(2·std²) per row (hand-computed
    from the kernel means), hinge = max(0, 1.5 − 1) = 0.5. At initialisation both are 0."""
    from imgalign.trainers.config import ObjectiveConfig
    from imgalign.trainers.objectives import GRPOObjective, TrainContext
    from imgalign.trainers.rewarding import Balanced
    from imgalign.trainers.rollout import kernel_mean_std

    a, s = _setup(sd3_dir, 1.0, branch_steps=[0, 2], branch_factors=[2], advantage="sibling")
    a.enable_full_finetune(keep_reference=True)
    ro = _roll(a, s)
    rows_ = ro.extras["tree"]
    bal = Balanced(torch.linspace(-1, 1, 8), torch.ones(8, dtype=torch.bool), 0.0)
    adv, valid = ro.extras["credit"](torch.zeros(1, 8), bal)
    valid = valid.clone()
    valid[1] = False  # a parent row without a valid edge is in neither mean
    valid[2, 0] = False  # one with a valid edge left is in both
    with torch.no_grad():
        a.transformer.proj_out.weight.mul_(1.5)
        a.transformer.proj_out.bias.mul_(1.5)
        v = a.velocity(rows_.x, rows_.sigma, rows_.cond, 1.0, transformer=a.transformer)
        with a.reference() as ref:
            v_ref = a.velocity(rows_.x, rows_.sigma, rows_.cond, 1.0, transformer=ref)
    torch.testing.assert_close(v, 1.5 * v_ref, rtol=1e-4, atol=1e-5)
    means = [
        kernel_mean_std(
            s.kernel, rows_.x, vel, rows_.sigma, rows_.sigma_next, s.noise_level, rows_.sigma_next_of_one
        )[0]
        for vel in (v, v_ref)
    ]
    kl = ((means[0] - means[1]).flatten(1) ** 2).sum(1) / (2 * rows_.std**2)  # [M]
    rows_on = valid.any(1)
    kl_on = float(kl[rows_on].mean())
    assert kl_on > 1e-3 and abs(kl_on - float(kl.mean())) > 1e-3 * kl_on  # the row mask matters
    ctx = TrainContext(a, a.transformer, 0)
    idx = torch.arange(rows_.x.shape[0])
    beta, lam = 0.3, 0.2

    def loss_with(kl_beta: float, penalty_weight: float) -> float:
        c = ObjectiveConfig(clip_range=0.2, kl_beta=kl_beta, penalty="vnorm", penalty_weight=penalty_weight)
        obj = GRPOObjective(c, s)
        obj.needs_reference = True  # the same forwards with either term off
        loss, m = obj.loss(ctx, ro, idx, obj.terms(ro)[0], adv, valid)
        assert m["policy/kl"] == pytest.approx(kl_on, rel=1e-3)
        return float(loss.detach())

    plain = loss_with(0.0, 0.0)
    assert loss_with(beta, 0.0) - plain == pytest.approx(beta * kl_on, rel=1e-3)
    assert loss_with(0.0, lam) - plain == pytest.approx(lam * 0.5, rel=1e-4)


def test_tree_penalty_is_a_mean_over_the_parent_rows_with_a_valid_edge(sd3_dir, monkeypatch):
    """A penalty equal to each parent row's index adds λ·mean of the indices of the rows with a valid edge (row 1
    has none, so it is out), as the tree KL is; not the mean over every row."""
    from imgalign.trainers.config import ObjectiveConfig
    from imgalign.trainers.objectives import GRPOObjective, TrainContext
    from imgalign.trainers.registry import PENALTIES

    def row_index(v: torch.Tensor, v_ref: torch.Tensor) -> torch.Tensor:
        return torch.arange(v.shape[0], dtype=v.dtype) + 0 * v.flatten(1).sum(1)

    monkeypatch.setitem(PENALTIES._items, "row_index", row_index)
    a, s, ro, adv, valid = _credited_tree(sd3_dir)
    rows_ = ro.extras["tree"]
    valid = valid.clone()
    valid[1] = False
    on = valid.any(1).nonzero().flatten().float()  # the rows with a valid edge
    assert 1 not in on.tolist() and float(on.mean()) != (rows_.x.shape[0] - 1) / 2
    ctx, idx = TrainContext(a, a.transformer, 0), torch.arange(rows_.x.shape[0])
    out = []
    for lam in (0.2, 0.0):
        obj = GRPOObjective(ObjectiveConfig(clip_range=0.2, penalty="row_index", penalty_weight=lam), s)
        obj.needs_reference = True
        loss, m = obj.loss(ctx, ro, idx, 0, adv, valid)
        out.append((float(loss.detach()), m))
    (with_pen, m), (plain, _) = out
    assert m["policy/penalty"] == pytest.approx(float(on.mean()))
    assert with_pen - plain == pytest.approx(0.2 * float(on.mean()), rel=1e-4)


def test_tree_kl_and_log_density_follow_logprob_reduce(sd3_dir):
    """objective.logprob_reduce: mean reduces the tree's edge log-densities and its KL alike, each the sum over the
    D latent elements divided by D (off the base, v_θ = 1.5·v_ref, so the KL is not 0)."""
    from imgalign.trainers.config import ObjectiveConfig
    from imgalign.trainers.objectives import GRPOObjective, TrainContext

    a, s, ro, adv, valid = _credited_tree(sd3_dir)
    rows_ = ro.extras["tree"]
    with torch.no_grad():
        a.transformer.proj_out.weight.mul_(1.5)
        a.transformer.proj_out.bias.mul_(1.5)
    ctx, idx = TrainContext(a, a.transformer, 0), torch.arange(rows_.x.shape[0])
    d = rows_.x[0].numel()
    m = {}
    for reduce in ("sum", "mean"):
        obj = GRPOObjective(ObjectiveConfig(clip_range=0.2, kl_beta=0.1, logprob_reduce=reduce), s)
        m[reduce] = obj.loss(ctx, ro, idx, 0, adv, valid)[1]
    assert m["sum"]["policy/kl"] > 1e-3
    assert m["mean"]["policy/kl"] == pytest.approx(m["sum"]["policy/kl"] / d, rel=1e-4)
    assert m["mean"]["policy/logprob"] == pytest.approx(m["sum"]["policy/logprob"] / d, rel=1e-4)


def test_tree_trains_its_guided_velocity_and_a_masked_child_edge_is_out_like_an_invalid_one(sd3_dir):
    """Trees sampled with CFG 3: the training forward and the KL's reference forward use it too, so on-policy every
    edge's ratio is 1 and the KL 0. An edge whose child_mask is False (a child never grown) is out of the loss and
    its metrics exactly as an edge with valid False; the log-density is the valid edges' mean."""
    from imgalign.trainers.config import ObjectiveConfig
    from imgalign.trainers.objectives import GRPOObjective, TrainContext

    a, s, ro, adv, valid = _credited_tree(sd3_dir, 3.0)
    rows_ = ro.extras["tree"]
    assert rows_.child_mask.all()
    obj = GRPOObjective(ObjectiveConfig(clip_range=0.2, kl_beta=0.1), s)
    ctx, idx = TrainContext(a, a.transformer, 0), torch.arange(rows_.x.shape[0])
    _, m = obj.loss(ctx, ro, idx, 0, adv, valid)
    assert m["policy/ratio_min"] == pytest.approx(1.0, abs=1e-4)
    assert m["policy/ratio_max"] == pytest.approx(1.0, abs=1e-4)
    assert m["policy/kl"] == pytest.approx(0.0, abs=1e-6)
    off = valid.clone()
    off[0, 1] = False
    by_valid, m_valid = obj.loss(ctx, ro, idx, 0, adv, off)
    assert float(by_valid.detach()) == pytest.approx(-float(adv[off].mean()), abs=1e-5)  # on-policy: −mean(A)
    assert abs(float(adv[off].mean())) > 1e-3
    lp = rows_.old_log_prob.flatten()[off.flatten()]
    assert m_valid["policy/logprob"] == pytest.approx(float(lp.double().mean()), rel=1e-5)
    rows_.child_mask[0, 1] = False
    by_mask, m_mask = obj.loss(ctx, ro, idx, 0, adv, valid)
    assert float(by_mask.detach()) == pytest.approx(float(by_valid.detach()), abs=1e-6)
    assert m_mask["policy/logprob"] == pytest.approx(m_valid["policy/logprob"], rel=1e-6)


def test_bench_scored_rollout_applies_tree_credit(sd3_dir, prompts, tmp_path):
    """The benches' scored_rollout trains with the tree's per-edge credit, as the trainer does (the balancer's [N]
    advantages on the parent rows were a size-mismatch error in the tree loss)."""
    from imgalign.trainers.testing import bench_trainer, scored_rollout

    cfg = write(tree_config(sd3_dir, tmp_path / "run", prompts), tmp_path / "c.yaml")
    tr = bench_trainer(cfg, [], tmp_path / "run")
    ro, scores, bal, adv, valid, tctx = scored_rollout(tr, 0)
    assert scores.shape == (1, 8) and bal.advantages.shape == (8,)
    assert adv.shape == valid.shape == (ro.num_rows, 2) == (6, 2)
    for term in tr.objective.terms(ro):
        loss, _ = tr.objective.loss(tctx, ro, torch.arange(ro.num_rows), term, adv, valid)
        loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in tr.params)


def test_tree_rollout_nfe_equals_formula_and_forward_rows(sd3_dir):
    from imgalign.trainers.tree import TreeSpec

    # CFG (guidance 3 > 1): one batched [uncond; cond] forward per row, so every row counts 2
    a, s = _setup(sd3_dir, 3.0, branch_steps=[1, 3], branch_factors=[2])
    counted = []
    pre = a.transformer.register_forward_pre_hook(
        lambda mod, args, kwargs: counted.append(kwargs["hidden_states"].shape[0]), with_kwargs=True
    )
    try:
        ro = _roll(a, s)
    finally:
        pre.remove()
    spec = TreeSpec(5, (1, 3), (2, 2))
    assert ro.nfe == spec.nfe(num_trees=2, cfg=True) == 2 * 2 * (1 + 1 + 2 + 2 + 4) == sum(counted)
    # forwards chunked by sampling.batch_size (8 rows at the last steps)
    assert max(counted) == 2 * s.batch_size
    assert ro.extras["metrics"]["perf/rollout_nfe"] == spec.nfe(num_trees=2, cfg=True)  # 2 prompts per step
    assert ro.images.shape[0] == 8 and ro.x0.shape[0] == 8


def test_tree_progressive_schedule_in_rollout(sd3_dir):
    a, s = _setup(
        sd3_dir, 1.0, branch_steps=[0, 1], branch_factors=[2], progressive=True, progressive_grow_every=5
    )
    early, later = _roll(a, s, step=0), _roll(a, s, step=5)
    # one 4-way branch at the last step
    assert early.train_steps == [3] and early.extras["tree"].x.shape[0] == 2
    # the window grew backwards: the shared prefix got shorter, so the rollout costs more (2 trees x (3 + 2 x 4))
    assert later.train_steps == [2] and (early.nfe, later.nfe) == (2 * (4 + 4), 2 * (3 + 2 * 4))


def test_tree_config_errors_fail_before_model_loads(sd3_dir, prompts, tmp_path, capsys, monkeypatch):
    import imgalign.adapters as adapters

    def boom(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(adapters, "load_adapter", boom)
    base = tree_config(sd3_dir, tmp_path / "run", prompts)
    cases = [
        ({"tree": {"branch_steps": [0, 1, 2], "branch_factors": [2]}}, "8 leaves per tree"),
        ({"tree": {"branch_steps": [0, 3], "branch_factors": [2]}}, "trainable SDE range"),
        ({"sde_window": 2}, "sde_window must be 0"),
        ({"tree": {"branch_steps": [0], "branch_factors": [1]}}, "branch_factors must be integers >= 2"),
        ({"samples_per_step": 4, "batch_size": 4, "group_size": 2, "tree": {"branch_steps": [0]}}, None),
    ]
    for patch, msg in cases:
        cfg = json.loads(json.dumps(base))
        cfg["sampling"].update(patch)
        code = main(["train", str(write(cfg, tmp_path / "bad.yaml")), "--print-config"])
        if msg is None:
            assert code == 0  # a valid variant
            capsys.readouterr()
            continue
        assert code == 2, patch
        assert msg in capsys.readouterr().err, msg
    cfg = json.loads(json.dumps(base))
    cfg["objective"]["name"] = "nft"
    assert main(["train", str(write(cfg, tmp_path / "bad.yaml"))]) == 2
    assert "use sampling.rollout=flat" in capsys.readouterr().err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_tree_resume_equals_uninterrupted(sd3_dir, prompts, tmp_path):
    # 2 steps: the 4 training prompts are all new at every step (adapter.encode caches prompts and encodes the
    # missing ones as one batch, so a repeated prompt's embedding depends on what it was first batched with)
    cfg = tree_config(sd3_dir, tmp_path / "ref", prompts)
    cfg["log"]["checkpoint_every"] = 1
    cfg["log"]["keep_last"] = 5
    assert main(["train", str(write(cfg, tmp_path / "ref.yaml"))]) == 0
    cfg["log"]["output_dir"] = str(tmp_path / "cut")
    path = write(cfg, tmp_path / "cut.yaml")
    assert main(["train", str(path), "--max-steps", "1"]) == 0
    assert main(["train", str(path), "--resume", "auto"]) == 0
    name = "step-000002/trainer_state/trainable.safetensors"
    a = load_file(str(tmp_path / "ref" / "checkpoints" / name))
    b = load_file(str(tmp_path / "cut" / "checkpoints" / name))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert rows(tmp_path / "ref")[-1]["perf/nfe_total"] == rows(tmp_path / "cut")[-1]["perf/nfe_total"] == 36

"""Tree rollouts: exact NFE accounting, recorded transitions, value propagation and edge advantages."""

import math

import pytest
import torch

from imgalign.trainers.tree import (
    TreeConfig,
    TreeSpec,
    backward_progressive_window,
    edge_advantages,
    edge_log_prob,
    euler_step,
    flat_nfe,
    flow_sde_mean_std,
    flow_sde_step,
    gaussian_log_prob,
    nfe_report,
    propagate_values,
    restrict_to_window,
    tree_advantages,
    tree_rollout,
    tree_spec_for_step,
)

torch.set_num_threads(1)


def test_spec_nfe_counts():
    spec = TreeSpec(10, (0, 3, 6), (2, 2, 2))
    assert [spec.alive(i) for i in range(10)] == [1, 2, 2, 2, 4, 4, 4, 8, 8, 8]
    assert spec.num_leaves == 8 and spec.num_edges() == 2 + 4 + 8
    assert spec.nfe() == 43 and spec.nfe(num_trees=3, cfg=True) == 43 * 6
    assert flat_nfe(8, 10) == 80 and flat_nfe(8, 10, cfg=True) == 160
    rep = nfe_report(spec, num_trees=2)
    assert rep["perf/nfe_per_leaf"] == pytest.approx(43 / 8)
    assert rep["perf/nfe_per_trained_edge"] == pytest.approx(43 / 14)
    assert rep["perf/rollout_nfe"] == 86 and rep["perf/flat_nfe_same_leaves"] == 2 * 8 * 10
    rep_cfg = nfe_report(spec, num_trees=2, cfg=True)
    assert rep_cfg["perf/rollout_nfe"] == 172 and rep_cfg["perf/flat_nfe_same_leaves"] == 2 * 8 * 10 * 2
    assert TreeSpec(4, (1,), (3,)).nfe() == 1 + 1 + 3 + 3
    with pytest.raises(ValueError, match="last step"):
        TreeSpec(10, (9,), (2,))
    with pytest.raises(ValueError, match="increasing"):
        TreeSpec(10, (3, 1), (2, 2))


def test_config_spec_and_validation():
    cfg = TreeConfig(branch_steps=[1, 2], branch_factors=[3])
    cfg.validate()
    assert cfg.spec(5) == TreeSpec(5, (1, 2), (3, 3))
    with pytest.raises(ValueError, match="branch_factors"):
        TreeConfig(branch_steps=[1, 2], branch_factors=[2, 2, 2]).validate()
    with pytest.raises(ValueError, match=">= 2"):
        TreeConfig(branch_factors=[1]).validate()


def test_config_validation_bounds_and_defaults():
    """validate() refuses no branch steps, value_temperature/adv_eps <= 0, adv_clip < 0, any of them infinite,
    progressive_initial or grow_every < 1 and grow_by < 0; the boundaries adv_clip = 0 (no clip) and grow_by = 0
    (a fixed window) pass."""
    from imgalign.config import ConfigError

    TreeConfig(
        adv_clip=0.0, progressive_initial=1, progressive_grow_every=1, progressive_grow_by=0
    ).validate()
    for bad, msg in [
        ({"branch_steps": []}, "branch_steps is empty"),
        ({"value_temperature": 0.0}, "value_temperature"),
        ({"adv_eps": 0.0}, "adv_eps"),
        ({"adv_clip": -1.0}, "adv_clip"),
        ({"adv_eps": float("inf")}, r"all finite \(got 1.0, inf, 5.0\)"),  # it zeroed every advantage
        ({"value_temperature": float("inf")}, "all finite"),
        ({"adv_clip": float("inf")}, "all finite"),
        ({"progressive_initial": 0}, "progressive_initial"),
        ({"progressive_grow_every": 0}, "grow_every"),
        ({"progressive_grow_by": -1}, "grow_by"),
    ]:
        with pytest.raises(ConfigError, match=msg):
            TreeConfig(**bad).validate()
    cfg = TreeConfig()  # documented defaults: BranchGRPO depth credit, mean values, Euler between branches
    assert (cfg.advantage, cfg.value, cfg.between) == ("depth", "mean", "ode")
    # and the numeric ones: advantages clipped to +-5 (0 would switch the clip off), the window grows by one step
    # every 10 training steps
    assert (cfg.value_temperature, cfg.adv_eps, cfg.adv_clip) == (1.0, 1e-4, 5.0)
    assert (
        cfg.progressive,
        cfg.progressive_initial,
        cfg.progressive_grow_every,
        cfg.progressive_grow_by,
    ) == (
        False,
        1,
        10,
        1,
    )


def test_spec_refuses_repeated_or_negative_steps_and_zero_factors():
    with pytest.raises(ValueError, match="increasing"):
        TreeSpec(10, (3, 3), (2, 2))
    with pytest.raises(ValueError, match="must lie in"):
        TreeSpec(10, (-1, 3), (2, 2))
    with pytest.raises(ValueError, match=">= 1"):
        TreeSpec(10, (3,), (0,))
    with pytest.raises(ValueError, match="one branching factor per branch step"):  # zip would drop step 6
        TreeSpec(10, (0, 3, 6), (2, 2))
    with pytest.raises(ValueError, match="num_steps must be >= 2"):
        TreeSpec(1, (), ())
    spec = TreeSpec(10, (0, 3, 8), (2, 3, 1))  # both ends of [0, num_steps - 2] and factor 1 are valid
    assert [spec.factor_at(i) for i in range(10)] == [2, 1, 1, 3, 1, 1, 1, 1, 1, 1]
    assert spec.num_leaves == 6


def test_sde_step_formula_and_ode_limit():
    x = torch.tensor([[1.0, -2.0], [0.5, 0.5]])
    v = torch.tensor([[0.3, 0.1], [-1.0, 2.0]])
    s, sn = torch.tensor([0.8, 1.0]), torch.tensor([0.6, 0.9])
    x1, mean, std = flow_sde_step(x, v, s, sn, 0.0)
    assert (
        torch.allclose(mean, euler_step(x, v, s, sn))
        and torch.equal(std, torch.zeros(2))
        and torch.allclose(x1, mean)
    )
    a = 0.7
    _, mean, std = flow_sde_step(x, v, s, sn, a, torch.Generator().manual_seed(0))
    # row 0 by hand: varsigma = a sqrt(.8/.2) = 1.4; dt = -.2; mu = x + v dt + (1.96/1.6)(x + .2 v) dt
    vs = 1.4
    mu0 = x[0] + v[0] * -0.2 + (vs**2 / 1.6) * (x[0] + 0.2 * v[0]) * -0.2
    assert torch.allclose(mean[0], mu0) and std[0] == pytest.approx(vs * math.sqrt(0.2))
    # row 1 at sigma = 1: the next sigma goes in the denominator, varsigma = a sqrt(1 / 0.1)
    assert std[1] == pytest.approx(a * math.sqrt(1 / 0.1) * math.sqrt(0.1), rel=1e-6)


def test_gaussian_log_prob_matches_torch_distributions():
    g = torch.Generator().manual_seed(1)
    x, mean = torch.randn(3, 2, 2, generator=g), torch.randn(3, 2, 2, generator=g)
    std = torch.tensor([0.5, 1.0, 2.0])
    ref = torch.distributions.Normal(mean, std[:, None, None]).log_prob(x).flatten(1).sum(1)
    assert torch.allclose(gaussian_log_prob(x, mean, std), ref.double(), atol=1e-5)
    # float32 terms, float64 sum: a term of -5e7 (float32 spacing 4 there) keeps the other's -0.919 in the sum
    big = gaussian_log_prob(torch.tensor([[1e4, 0.0]]), torch.zeros(1, 2), torch.ones(1))
    terms = -torch.tensor([5e7, 0.0]) - 0.5 * math.log(
        2.0 * math.pi
    )  # float32, as the function computes them
    assert big.dtype == torch.float64 and float(big) == float(terms.double().sum()) != float(terms.sum())


class _Counter:
    """Velocity fn that records the rows it is called with; depends on x, sigma and the tree (prompt) index."""

    def __init__(self):
        self.rows = []

    def __call__(self, x, sigma, root):
        self.rows.append(x.shape[0])
        return -0.5 * x + sigma[:, None, None, None] * (1.0 + root[:, None, None, None].float())


def test_rollout_nfe_shared_prefix_and_recorded_transitions():
    spec = TreeSpec(6, (0, 2, 3), (2, 3, 2))
    sigmas = torch.linspace(1.0, 0.0, 7)
    noise = torch.randn(2, 1, 2, 2, generator=torch.Generator().manual_seed(0))
    vf = _Counter()
    roll = tree_rollout(vf, noise, sigmas, spec, noise_level=0.7, generator=torch.Generator().manual_seed(1))
    assert vf.rows == [2 * spec.alive(i) for i in range(6)] == [2, 4, 4, 12, 24, 24]
    assert roll.nfe == spec.nfe(num_trees=2) == sum(vf.rows)
    roll2 = tree_rollout(
        vf, noise, sigmas, spec, generator=torch.Generator().manual_seed(1), cfg_multiplier=2
    )
    assert roll2.nfe == spec.nfe(num_trees=2, cfg=True)
    # leaves: tree-major, 12 per tree
    assert roll.leaves.shape == (24, 1, 2, 2) and roll.leaf_root.tolist() == [0] * 12 + [1] * 12
    # edges: per tree 2 + 6 + 12 = 20; parents per tree 1 + 2 + 6 = 9
    assert roll.edge_child.shape == (40,) and roll.parent_x.shape == (18, 1, 2, 2)
    assert sorted(roll.edge_step.tolist()) == [0] * 4 + [2] * 12 + [3] * 24
    # siblings share their parent row, hence the same x, mean, std
    f = roll.edge_fields()
    same_parent = roll.edge_parent[:-1] == roll.edge_parent[1:]
    assert same_parent.any()
    assert torch.equal(f["mean"][:-1][same_parent], f["mean"][1:][same_parent])
    # children of the first branch of tree 0 start from tree 0's noise
    assert torch.equal(roll.parent_x[0], noise[0]) and torch.equal(roll.parent_x[1], noise[1])
    # recorded mean/std are the ones used: re-evaluating with the same velocity reproduces them, ratio == 1
    v = vf(roll.parent_x, roll.parent_sigma, roll.parent_root)
    _, mean, std = flow_sde_step(roll.parent_x, v, roll.parent_sigma, roll.parent_sigma_next, 0.7)
    assert torch.allclose(mean, roll.parent_mean) and torch.allclose(std, roll.parent_std)
    lp = gaussian_log_prob(roll.edge_x_next, mean[roll.edge_parent], std[roll.edge_parent])
    assert torch.allclose(torch.exp(lp - roll.edge_log_prob).float(), torch.ones(40), atol=1e-5)
    mean_only, std_only = flow_sde_mean_std(roll.parent_x, v, roll.parent_sigma, roll.parent_sigma_next, 0.7)
    assert torch.allclose(mean_only, mean) and torch.equal(std_only, std)
    assert torch.allclose(
        torch.exp(edge_log_prob(roll, mean_only) - roll.edge_log_prob).float(), torch.ones(40), atol=1e-5
    )
    # a perturbed policy gives ratio != 1
    assert not torch.allclose(edge_log_prob(roll, mean_only + 0.1), roll.edge_log_prob)
    # node bookkeeping: every edge child has the edge's parent node as parent, depth = parent depth + 1
    assert torch.equal(roll.node_parent[roll.edge_child], roll.parent_node[roll.edge_parent])
    assert torch.equal(
        roll.node_depth[roll.edge_child], roll.node_depth[roll.parent_node[roll.edge_parent]] + 1
    )
    assert roll.node_depth[roll.leaf_node].tolist() == [3] * 24


def test_rollout_chunking_and_between_sde():
    spec = TreeSpec(4, (1,), (3,))
    sigmas = torch.linspace(1.0, 0.0, 5)
    noise = torch.randn(3, 1, 2, 2, generator=torch.Generator().manual_seed(0))
    a = tree_rollout(_Counter(), noise, sigmas, spec, generator=torch.Generator().manual_seed(2))
    vf = _Counter()
    b = tree_rollout(vf, noise, sigmas, spec, generator=torch.Generator().manual_seed(2), max_batch=2)
    assert torch.equal(a.leaves, b.leaves) and a.nfe == b.nfe and max(vf.rows) == 2
    c = tree_rollout(
        _Counter(), noise, sigmas, spec, between="sde", generator=torch.Generator().manual_seed(2)
    )
    assert c.nfe == a.nfe and not torch.allclose(c.leaves, a.leaves)
    # between="ode" (the default): a step that does not branch is the deterministic Euler step, so the first
    # branch starts from Euler(noise); with "sde" it starts from a noisy step
    s0, s1, root = sigmas[0].expand(3), sigmas[1].expand(3), torch.arange(3)
    euler = euler_step(noise, _Counter()(noise, s0, root), s0, s1)
    assert torch.equal(a.parent_x, euler) and not torch.allclose(c.parent_x, euler)
    with pytest.raises(ValueError, match="sigmas"):
        tree_rollout(_Counter(), noise, sigmas[:-1], spec)


def test_rollout_hands_its_noise_level_and_generator_to_every_sde_step():
    """Every SDE transition (the branch and, with between="sde", the single-child steps) gets the rollout's
    noise_level and generator: 4 steps, a branch at step 1, so 4 calls at a = 0.3 (not the default 0.7), and
    the recorded std is the formula's at a = 0.3."""
    spec = TreeSpec(4, (1,), (2,))
    sigmas = torch.linspace(1.0, 0.0, 5)
    noise = torch.randn(2, 1, 2, 2, generator=torch.Generator().manual_seed(0))
    calls = []

    def recorded(x, v, s, sn, a, g):
        calls.append((a, g))
        return flow_sde_step(x, v, s, sn, a, g)

    gen = torch.Generator().manual_seed(4)
    roll = tree_rollout(
        _Counter(), noise, sigmas, spec, sde_step=recorded, noise_level=0.3, between="sde", generator=gen
    )
    assert [a for a, _ in calls] == [0.3] * 4 and all(g is gen for _, g in calls)
    _, std = flow_sde_mean_std(roll.parent_x, roll.parent_x, roll.parent_sigma, roll.parent_sigma_next, 0.3)
    torch.testing.assert_close(roll.parent_std, std)


def test_rollout_a_branch_of_factor_one_is_a_recorded_single_child_sde_edge():
    """TreeSpec allows a branching factor of 1: that step is still an SDE transition whose edge is recorded and
    trained (one child per node), not an untrained Euler step."""
    sigmas = torch.linspace(1.0, 0.0, 5)
    noise = torch.randn(2, 1, 2, 2, generator=torch.Generator().manual_seed(0))
    roll = tree_rollout(
        _Counter(), noise, sigmas, TreeSpec(4, (1,), (1,)), generator=torch.Generator().manual_seed(1)
    )
    assert roll.edge_step.tolist() == [1, 1] and roll.leaves.shape == (2, 1, 2, 2)
    assert (roll.parent_std > 0).all() and roll.edge_child.tolist() == [2, 3]
    assert not torch.allclose(roll.edge_x_next, roll.parent_mean)  # a noisy child, not the Euler-like mean


def test_rollout_refuses_bad_arguments_and_edge_fields_follow_the_parent_row():
    spec = TreeSpec(4, (0, 2), (2, 2))
    sigmas = torch.linspace(1.0, 0.0, 5)
    noise = torch.zeros(2, 1, 1, 1)
    for kw, msg in [({"cfg_multiplier": 3}, "cfg_multiplier"), ({"between": "euler"}, "between")]:
        with pytest.raises(ValueError, match=msg):
            tree_rollout(_Counter(), noise, sigmas, spec, **kw)
    with pytest.raises(ValueError, match="sigmas"):  # one sigma too many is refused too
        tree_rollout(_Counter(), noise, torch.linspace(1.0, 0.0, 6), spec)
    with pytest.raises(ValueError, match="sigmas"):  # as is a [1, T + 1] schedule of the right size
        tree_rollout(_Counter(), noise, sigmas[None], spec)

    def doubled_std(x, v, s, sn, a, g):  # a kernel returning [2N] stds: refused, not silently subsampled
        x1, mean, std = flow_sde_step(x, v, s, sn, a, g)
        return x1, mean, std.repeat(2)

    with pytest.raises(ValueError, match="std of shape"):
        tree_rollout(_Counter(), noise, sigmas, spec, sde_step=doubled_std)

    def one_std(x, v, s, sn, a, g):  # a one-element std is shared by every row, as a scalar is
        x1, mean, std = flow_sde_step(x, v, s, sn, a, g)
        return x1, mean, std[:1]

    ref = tree_rollout(_Counter(), noise, sigmas, spec, generator=torch.Generator().manual_seed(0))
    one = tree_rollout(
        _Counter(), noise, sigmas, spec, sde_step=one_std, generator=torch.Generator().manual_seed(0)
    )
    assert torch.equal(one.parent_std, ref.parent_std) and torch.equal(one.edge_log_prob, ref.edge_log_prob)
    with pytest.raises(ValueError, match="no branch steps"):
        tree_rollout(_Counter(), noise, sigmas, TreeSpec(4, (), ()))
    roll = tree_rollout(_Counter(), noise, sigmas, spec, generator=torch.Generator().manual_seed(0))
    f = roll.edge_fields()
    # edges: step 0 (2 trees x 2 children), then step 2 (4 parents x 2 children), tree-major, siblings adjacent
    assert f["root"].tolist() == [0, 0, 1, 1] + [0] * 4 + [1] * 4
    assert f["step"].tolist() == [0] * 4 + [2] * 8
    torch.testing.assert_close(f["sigma"], torch.tensor([1.0] * 4 + [0.5] * 8))
    torch.testing.assert_close(f["sigma_next"], torch.tensor([0.75] * 4 + [0.25] * 8))
    assert f["parent_node"].tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    # per edge: its parent row's x, mean and std, its own child node, x_next and log-density
    p = roll.edge_parent
    assert p.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    for key, want in [("x", roll.parent_x[p]), ("mean", roll.parent_mean[p]), ("std", roll.parent_std[p])]:
        assert torch.equal(f[key], want), key
    assert f["child_node"].tolist() == list(range(2, 14)) and torch.equal(f["x_next"], roll.edge_x_next)
    assert torch.equal(f["log_prob"], roll.edge_log_prob)
    assert not torch.equal(f["x"], f["x_next"]) and not torch.equal(f["std"][:4], f["std"][4:8])


# Hand-built tree: root 0 -> children 1, 2; 1 -> leaves 3, 4; 2 -> leaves 5, 6.
PARENT = torch.tensor([-1, 0, 0, 1, 1, 2, 2])
DEPTH = torch.tensor([0, 1, 1, 2, 2, 2, 2])
ROOT = torch.zeros(7, dtype=torch.long)
LEAVES = torch.tensor([3, 4, 5, 6])
EDGE_CHILD = torch.tensor([1, 2, 3, 4, 5, 6])


def test_value_propagation_hand_built():
    r = torch.tensor([1.0, 3.0, 5.0, 9.0])
    vals = propagate_values(PARENT, DEPTH, LEAVES, r)
    assert torch.allclose(vals, torch.tensor([4.5, 2.0, 7.0, 1.0, 3.0, 5.0, 9.0]))
    # log-prob weighted: weights softmax(logit) among siblings: leaves 3, 4 with logits log 1, log 3 -> 1/4, 3/4
    logit = torch.tensor([0.0, 0.0, 0.0, math.log(1.0), math.log(3.0), 0.0, 0.0])
    vals_w = propagate_values(PARENT, DEPTH, LEAVES, r, logit)
    assert vals_w[1] == pytest.approx(0.25 * 1 + 0.75 * 3) and vals_w[0] == pytest.approx((2.5 + 7.0) / 2)
    # several rewards at once
    two = propagate_values(PARENT, DEPTH, LEAVES, torch.stack([r, -r], 1))
    assert torch.allclose(two[:, 1], -vals)
    assert propagate_values(PARENT, DEPTH, LEAVES, r[:, None]).shape == (7, 1)  # [L, 1] stays 2-D


def test_value_propagation_skips_missing_leaves_and_is_stable_for_large_logits():
    r = torch.tensor([1.0, 3.0, 5.0, 9.0])
    # leaf 6 has no reward: node 2 is the mean of its valid child only, and the root of its two children
    part = propagate_values(PARENT, DEPTH, LEAVES[:3], r[:3])
    assert part[6].isnan() and part[2] == pytest.approx(5.0) and part[0] == pytest.approx((2.0 + 5.0) / 2)
    # no leaf under node 2: it stays NaN and the root is node 1's value
    sub = propagate_values(PARENT, DEPTH, LEAVES[:2], r[:2])
    assert sub[2].isnan() and sub[0] == pytest.approx(2.0)
    # the softmax over siblings is shift-invariant and finite for logits far outside exp's range
    logit = torch.tensor([0.0, 0.0, 0.0, math.log(1.0), math.log(3.0), 0.0, 0.0])
    ref = propagate_values(PARENT, DEPTH, LEAVES, r, logit)
    for shift in (1000.0, -1000.0):
        torch.testing.assert_close(propagate_values(PARENT, DEPTH, LEAVES, r, logit + shift), ref)


def test_edge_advantage_clip_is_symmetric_and_zero_means_no_clip():
    vals = propagate_values(PARENT, DEPTH, LEAVES, torch.tensor([1.0, 3.0, 5.0, 9.0]))
    raw = edge_advantages(vals, EDGE_CHILD, PARENT, ROOT, DEPTH, "depth", eps=0.0, clip=0.0)
    std2 = math.sqrt((3.5**2 + 1.5**2 + 0.5**2 + 4.5**2) / 4)
    assert float(raw.min()) == pytest.approx(-3.5 / std2) and float(raw.max()) == pytest.approx(4.5 / std2)
    clipped = edge_advantages(vals, EDGE_CHILD, PARENT, ROOT, DEPTH, "depth", eps=0.0, clip=1.1)
    torch.testing.assert_close(clipped, raw.clamp(-1.1, 1.1))
    assert float(clipped.min()) == pytest.approx(-1.1) and float(clipped.max()) == pytest.approx(1.1)
    with pytest.raises(ValueError, match="mode must be"):
        edge_advantages(vals, EDGE_CHILD, PARENT, ROOT, DEPTH, "leaf")


def test_edge_advantages_hand_built():
    r = torch.tensor([1.0, 3.0, 5.0, 9.0])
    vals = propagate_values(PARENT, DEPTH, LEAVES, r)
    sib = edge_advantages(vals, EDGE_CHILD, PARENT, ROOT, DEPTH, "sibling", eps=0.0)
    assert torch.allclose(sib, torch.tensor([-1.0, 1.0, -1.0, 1.0, -1.0, 1.0]))
    dep = edge_advantages(vals, EDGE_CHILD, PARENT, ROOT, DEPTH, "depth", eps=0.0)
    std2 = math.sqrt((3.5**2 + 1.5**2 + 0.5**2 + 4.5**2) / 4)
    expected = torch.tensor([-1.0, 1.0, -3.5 / std2, -1.5 / std2, 0.5 / std2, 4.5 / std2])
    assert torch.allclose(dep, expected, atol=1e-6)
    clipped = edge_advantages(vals, EDGE_CHILD, PARENT, ROOT, DEPTH, "depth", eps=0.0, clip=1.2)
    assert float(clipped.max()) == pytest.approx(1.2)
    # tree mode: values of leaf rewards normalised over the tree (done by tree_advantages) are used as they are
    norm_r = (r - 4.5) / std2
    tv = propagate_values(PARENT, DEPTH, LEAVES, norm_r)
    tr = edge_advantages(tv, EDGE_CHILD, PARENT, ROOT, DEPTH, "tree")
    assert torch.allclose(tr, torch.tensor([-2.5, 2.5, -3.5, -1.5, 0.5, 4.5]) / std2, atol=1e-6)
    # ties within a sibling group give exactly zero
    tied = propagate_values(PARENT, DEPTH, LEAVES, torch.tensor([2.0, 2.0, 5.0, 9.0]))
    sib_t = edge_advantages(tied, EDGE_CHILD, PARENT, ROOT, DEPTH, "sibling")
    assert sib_t[2] == 0.0 and sib_t[3] == 0.0


def test_tree_advantages_on_rollout_and_two_trees():
    spec = TreeSpec(4, (0, 1), (2, 2))
    roll = tree_rollout(_Counter(), torch.zeros(2, 1, 1, 1), torch.linspace(1.0, 0.0, 5), spec)
    # leaves tree-major, siblings adjacent: tree 0 leaves [a, b | c, d], tree 1 the same + 100
    r = torch.tensor([1.0, 3.0, 5.0, 9.0, 101.0, 103.0, 105.0, 109.0])
    for mode in ("depth", "sibling", "tree"):
        adv = tree_advantages(roll, r, mode=mode, eps=0.0)
        a0, a1 = adv[roll.parent_root[roll.edge_parent] == 0], adv[roll.parent_root[roll.edge_parent] == 1]
        assert torch.allclose(a0, a1, atol=1e-5), mode  # a per-tree shift changes nothing
    adv = tree_advantages(roll, r, mode="depth", eps=0.0)
    first = roll.edge_step == 0
    assert torch.allclose(adv[first], torch.tensor([-1.0, 1.0, -1.0, 1.0]))
    # the clip reaches edge_advantages: +-1 at the first branch is cut to +-0.5
    torch.testing.assert_close(
        tree_advantages(roll, r, mode="depth", eps=0.0, clip=0.5), adv.clamp(-0.5, 0.5)
    )
    assert float(adv.abs().max()) > 0.5
    adv_w = tree_advantages(roll, r, mode="depth", value="logprob", temperature=1.0)
    assert adv_w.shape == adv.shape and torch.isfinite(adv_w).all()
    with pytest.raises(ValueError, match="rewards"):
        tree_advantages(roll, r[:3])
    with pytest.raises(ValueError, match="value must be"):
        tree_advantages(roll, r, value="logp")
    # two trees of the same prompt: root_group pools them, so tree 1 (+100) gets the positive advantages
    pooled = tree_advantages(roll, r, mode="tree", eps=0.0, root_group=torch.tensor([0, 0]))
    tree1 = roll.parent_root[roll.edge_parent] == 1
    assert (pooled[tree1] > 0).all() and (pooled[~tree1] < 0).all()
    pooled_depth = tree_advantages(roll, r, mode="depth", eps=0.0, root_group=torch.tensor([0, 0]))
    assert (pooled_depth[tree1 & first] > 0).all()
    with pytest.raises(ValueError, match="root_group"):
        tree_advantages(roll, r, root_group=torch.tensor([0]))


def test_logprob_values_weight_siblings_by_their_log_prob_per_dim_over_temperature():
    """value="logprob": a node's value is the mean of its children's values weighted by
    softmax(edge_log_prob / d / temperature) over the siblings (d = latent numel). Hand-computed on one tree
    root -> A, B -> leaves a1, a2 | b1, b2 with d = 2 and temperature 2, so each weight is exp(log_prob / 4)."""
    import dataclasses

    spec = TreeSpec(4, (0, 1), (2, 2))
    roll = tree_rollout(_Counter(), torch.zeros(1, 2, 1, 1), torch.linspace(1.0, 0.0, 5), spec)
    assert roll.edge_x_next[0].numel() == 2
    r = torch.tensor([1.0, 3.0, 1.0, 3.0])  # normalised over the tree (mode "tree"): [-1, 1, -1, 1]
    # log-probs of the leaf edges a1, a2, b1, b2: weights 1, 3 under A and 3, 1 under B
    leaf_lp = torch.tensor([0.0, 4 * math.log(3.0), 4 * math.log(3.0), 0.0], dtype=torch.float64)
    lp = torch.tensor([5.0, -7.0] * (roll.edge_child.shape[0] // 2), dtype=torch.float64)  # A, B: root only
    for i, node in enumerate(roll.leaf_node.tolist()):
        lp[roll.edge_child == node] = leaf_lp[i]
    roll = dataclasses.replace(roll, edge_log_prob=lp)
    adv = tree_advantages(roll, r, mode="tree", value="logprob", temperature=2.0, eps=0.0)
    first = roll.edge_step == 0
    # V_A = (1 * -1 + 3 * 1) / 4, V_B = (3 * -1 + 1 * 1) / 4; the leaf edges keep their normalised rewards
    torch.testing.assert_close(adv[first], torch.tensor([0.5, -0.5]))
    leaf_adv = {int(c): float(a) for c, a in zip(roll.edge_child[~first], adv[~first])}
    assert [leaf_adv[n] for n in roll.leaf_node.tolist()] == pytest.approx([-1.0, 1.0, -1.0, 1.0])
    plain = tree_advantages(roll, r, mode="tree", value="mean", eps=0.0)
    torch.testing.assert_close(plain[first], torch.zeros(2))  # unweighted: both means are 0


def test_backward_progressive_schedule():
    assert backward_progressive_window(0, 10, initial=1, grow_every=10) == [8]
    assert backward_progressive_window(25, 10, initial=1, grow_every=10, grow_by=1) == [6, 7, 8]
    assert backward_progressive_window(10_000, 10) == list(range(9))
    # grow_by steps are added only once a whole grow_every period has passed; train_step < 0 counts as 0
    assert backward_progressive_window(5, 10, initial=1, grow_every=10, grow_by=2) == [8]
    assert backward_progressive_window(10, 10, initial=1, grow_every=10, grow_by=2) == [6, 7, 8]
    assert backward_progressive_window(-5, 10) == [8]
    assert backward_progressive_window(0, 2) == [0]  # two sampling steps: only step 0 is trainable
    with pytest.raises(ValueError, match="num_steps >= 2"):
        backward_progressive_window(0, 1)
    base = TreeSpec(10, (0, 3, 6), (2, 2, 2))
    assert restrict_to_window(base, 8) == TreeSpec(10, (8,), (8,))
    assert restrict_to_window(base, 6) == TreeSpec(10, (6,), (8,))
    assert restrict_to_window(base, 3) == TreeSpec(10, (3, 6), (4, 2))
    assert restrict_to_window(base, 0) == base
    # fewer NFEs when branching late: the long prefix is shared
    assert restrict_to_window(base, 8).nfe() == 9 + 8 < base.nfe()
    cfg = TreeConfig(progressive=True, progressive_initial=2, progressive_grow_every=5)
    assert tree_spec_for_step(cfg, 10, 0) == TreeSpec(10, (7,), (8,))
    assert tree_spec_for_step(cfg, 10, 5) == TreeSpec(10, (6,), (8,))
    assert tree_spec_for_step(TreeConfig(), 10, 5) == base


def test_tree_config_through_load_config():
    from imgalign.config import ConfigError, load_config

    cfg = load_config(
        TreeConfig, overrides=["branch_steps=[1, 2]", "branch_factors=[3]", "advantage=sibling"]
    )
    assert cfg.spec(6) == TreeSpec(6, (1, 2), (3, 3)) and cfg.advantage == "sibling"
    with pytest.raises(ConfigError, match="advantage"):
        load_config(TreeConfig, overrides=["advantage=foo"])
    with pytest.raises(ValueError, match="last step"):
        TreeConfig(branch_steps=[9]).spec(
            10
        )  # checked against the step count when the trainer builds the spec


def test_rollout_records_each_parent_rows_own_std_from_a_per_row_kernel():
    """A kernel may return a different std per row ([N], isotropic within a row): every parent row records the
    std its own children were sampled with (not another row's), so the log-densities recomputed from the parent
    rows match the recorded ones. Here the std grows with |x| of the row, so the two trees' roots differ."""

    def wide(x, v, s, sn, a, g):
        mean, std = flow_sde_mean_std(x, v, s, sn, a)
        std = std * (1.0 + x.flatten(1).abs().mean(1))  # [N], equal for siblings (they share x)
        eps = torch.randn(x.shape, generator=g)
        return mean + std[:, None, None, None] * eps, mean, std

    spec = TreeSpec(4, (0, 2), (2, 2))
    noise = (
        torch.randn(2, 1, 2, 2, generator=torch.Generator().manual_seed(0))
        * torch.tensor([1.0, 5.0])[:, None, None, None]
    )
    roll = tree_rollout(
        _Counter(),
        noise,
        torch.linspace(1.0, 0.0, 5),
        spec,
        sde_step=wide,
        generator=torch.Generator().manual_seed(1),
    )
    _, std = flow_sde_mean_std(roll.parent_x, roll.parent_x, roll.parent_sigma, roll.parent_sigma_next, 0.7)
    want = std * (1.0 + roll.parent_x.flatten(1).abs().mean(1))
    torch.testing.assert_close(roll.parent_std, want)
    assert not torch.allclose(roll.parent_std[0], roll.parent_std[1])  # the two roots' stds differ
    lp = gaussian_log_prob(roll.edge_x_next, roll.parent_mean[roll.edge_parent], want[roll.edge_parent])
    torch.testing.assert_close(lp, roll.edge_log_prob)

"""Mutation round 25 (stop 62): the rollout's kernel dispatch steps from sigma_i to sigma_{i+1} for both kernels."""

from __future__ import annotations

import math

import pytest
import torch

from imgalign.trainers import kernels as K
from imgalign.trainers.rollout import step_kernel

torch.set_num_threads(1)


@pytest.mark.parametrize("kernel", ["sde", "cps"])
def test_step_kernel_takes_transition_i_from_sigma_i_to_the_next_sigma(kernel: str) -> None:
    """step_kernel(kernel, ..., sigmas, i) is the kernel's step sigmas[i] -> sigmas[i + 1]: its std is the
    hand-computed std of that step (CPS: sigma_{i+1}·sin(a·pi/2); SDE: a·sqrt(s/(1 - s))·sqrt(s - s')), and its
    mean and log-density at a stored sample are the kernel's own. A CPS step to sigma_i itself made no progress
    and its std that of the wrong noise level, in the rollout and in the loss alike."""
    g = torch.Generator().manual_seed(5)
    x, v, y = (torch.randn(2, 2, 4, 4, generator=g) for _ in range(3))
    sigmas = torch.tensor([1.0, 0.75, 0.5, 0.25, 0.0])
    i, a = 1, 0.7
    out = step_kernel(kernel, x, v, sigmas, i, a, prev_sample=y)
    if kernel == "cps":
        std = 0.5 * math.sin(a * math.pi / 2)
        ref = K.cps_step(x, v, 0.75, 0.5, a, prev_sample=y)
    else:
        std = a * math.sqrt(0.75 / 0.25) * math.sqrt(0.25)
        ref = K.flow_sde_step(x, v, 0.75, 0.5, a, 0.75, prev_sample=y)
    assert out.std.tolist() == pytest.approx([std, std], rel=1e-6)
    torch.testing.assert_close(out.mean, ref.mean)
    torch.testing.assert_close(out.log_prob, ref.log_prob)


def test_tree_credit_gives_zero_advantage_to_every_padded_slot_and_masked_edge():
    """A tree of branch factors 2 then 3 (step-0 rows padded to k = 3) with one leaf masked by the balancer (NaN
    advantage, valid False): the credit's advantages [M, k] are finite, 0 wherever valid is False (padding, the
    masked leaf's edge), and valid only on real children; a NaN or another edge's advantage left in a slot the
    mask drops reached whatever reads the advantages unmasked (balancer mixes, logs). The logged
    tree/edge_valid_ratio is the share of the edges that are valid (padded slots are no edges)."""
    from test_mut_r21b_tree import _roll, _sampling

    from imgalign.trainers.rewarding import Balanced

    s = _sampling(group_size=6, branch_factors=[2, 3])
    ro = _roll(s)
    rows = ro.extras["tree"]
    assert not bool(rows.child_mask.all())  # some rows are padded
    adv_in = torch.linspace(-1, 1, 12)
    adv_in[4] = float("nan")
    leaf_valid = torch.ones(12, dtype=torch.bool)
    leaf_valid[4] = False
    adv, valid = ro.extras["credit"](torch.zeros(1, 12), Balanced(adv_in, leaf_valid, 0.0))
    assert adv.shape == valid.shape == rows.child_mask.shape
    assert bool(torch.isfinite(adv).all())
    assert not bool((valid & ~rows.child_mask).any())
    assert not bool(valid.all()) and bool((adv[~valid] == 0).all())
    assert bool((adv[valid] != 0).any())
    # the logged share of valid edges counts edges, not the padded slots
    ratio = ro.extras["metrics"]["tree/edge_valid_ratio"]
    assert ratio == pytest.approx(float(valid.sum()) / float(rows.child_mask.sum()), rel=1e-6)


def test_each_tree_is_conditioned_on_its_own_groups_prompt():
    """Two prompts of 4 leaves each ("ab", "cdef": codes 2 and 4 in the closed-form flow): every sample row and
    every parent row carries the conditioning of its own group's prompt; the second tree conditioned on the first
    group's second row (the first prompt again) sampled both trees for "ab"."""
    from test_mut_r21b_tree import PROMPTS, _roll, _sampling

    s = _sampling()
    ro = _roll(s)
    codes = [float(len(p)) for p in PROMPTS for _ in range(s.group_size)]
    assert ro.cond.pooled.flatten().tolist() == codes
    rows = ro.extras["tree"]
    root_codes = [codes[int(r) * s.group_size] for r in range(len(PROMPTS))]
    assert sorted(set(rows.cond.pooled.flatten().tolist())) == sorted(set(root_codes))


def _tree_rollout(s, prompts: list[str], group_ids: torch.Tensor):  # noqa: ANN001, ANN202
    from imgalign.trainers.rollout import ROLLOUTS, RolloutContext
    from imgalign.trainers.testing import ClosedFormFlow

    ctx = RolloutContext(ClosedFormFlow(), None, s, seed=3, step=0, logprob_reduce="sum")
    ids = torch.arange(len(prompts)) + int(group_ids[0]) * s.group_size
    return ROLLOUTS.get("tree")(ctx, prompts, [{}] * len(prompts), ids, group_ids)


def test_a_tree_is_the_same_sampled_with_the_other_tree_or_alone():
    """Every SDE noise of tree g comes from tree g's own generator: the second group's leaves sampled together
    with the first group (one process) equal those sampled alone (its own process), so trees do not depend on how
    they are split; drawing a batch's SDE noise from the other tree's generator broke that."""
    from test_mut_r21b_tree import PROMPTS, _sampling

    s = _sampling()
    g = s.group_size
    both = [p for p in PROMPTS for _ in range(g)]
    with torch.no_grad():
        together = _tree_rollout(s, both, torch.arange(2 * g) // g)
        alone = _tree_rollout(s, both[g:], torch.ones(g, dtype=torch.long))
    torch.testing.assert_close(together.latents[g:], alone.latents)
    assert not torch.equal(together.latents[:g], together.latents[g:])


def test_a_tree_spec_whose_leaves_are_not_the_group_is_refused_by_the_rollout():
    """A SamplingConfig built in code without validate() (group_size 4, branch factors 3 and 2: 6 leaves): the
    tree rollout refuses it by name rather than scoring 6 leaves as a group of 4."""
    from imgalign.trainers.config import SamplingConfig
    from imgalign.trainers.tree import TreeConfig

    s = SamplingConfig(
        num_steps=5,
        group_size=4,
        samples_per_step=8,
        batch_size=3,
        rollout="tree",
        tree=TreeConfig(branch_steps=[0, 2], branch_factors=[3, 2]),
    )
    with pytest.raises(ValueError, match="6 leaves per tree but group_size=4"):
        _tree_rollout(s, ["ab"] * 4 + ["cdef"] * 4, torch.arange(8) // 4)


def test_check_rollout_refuses_more_prompts_than_images():
    """A Rollout of 4 images whose prompt list has a fifth entry (a strategy that appended one): refused by name,
    as a list one short is; the trainer would have paired prompt k with image k and scored the wrong prompt."""
    from test_mut_r15_rollout import _rollout

    from imgalign.trainers.rollout import check_rollout

    ro = _rollout(4)
    ro.prompts = [*ro.prompts, "extra"]
    with pytest.raises(
        ValueError, match=r"sampling.rollout 'mine' returned images \(4, 3, 4, 4\) and 5 prompts"
    ):
        check_rollout("mine", ro, 4)

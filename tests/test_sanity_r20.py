"""Round 20 (stop 57) tests of rewards/sanity.py: the true-vs-corrupted prompt check."""

import torch

from imgalign import shapes as W
from imgalign.rewards.base import RewardOutput
from imgalign.rewards.sanity import KINDS, true_vs_corrupted

torch.set_num_threads(1)


def by_length(images, prompts, metadata):
    return RewardOutput(torch.tensor([float(len(p)) for p in prompts]))


def test_a_swap_check_measures_swaps_only() -> None:
    """--kinds swap: every pair is a colour swap; color_attr prompts of one colour twice (42 of the 270 training
    ones), which no swap applies to, were changed in shape instead, and counted in the swap check's accuracy."""
    res = true_vs_corrupted(by_length, n=24, seed=0, batch_size=8, kinds=("swap",))
    assert set(res.per_kind) == {"swap"} and set(res.per_task) == {"color_attr"}
    from imgalign.rewards.sanity import checkable_specs

    specs = checkable_specs(24, 0, ("swap",))
    assert len(specs) == 24 and all(s.include[0].color != s.include[1].color for s in specs)


def test_the_default_check_draws_the_training_specs_as_they_are() -> None:
    """Every kind: shape applies to every spec, so the specs are sample_training_specs' own (seeded)."""
    from imgalign.prompts.shapes import sample_training_specs
    from imgalign.rewards.sanity import checkable_specs

    assert checkable_specs(30, 5, KINDS) == sample_training_specs(30, seed=5, tasks=W.TASKS)
    assert checkable_specs(12, 1, ("count",)) == sample_training_specs(12, seed=1, tasks=["counting"])

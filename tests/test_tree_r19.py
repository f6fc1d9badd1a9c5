"""Round 19 (stop 56): survivors of the hand-written mutations of imgalign.trainers.tree."""

from __future__ import annotations

import torch

from imgalign.trainers.tree import flow_sde_step, propagate_values

torch.set_num_threads(1)


def test_flow_sde_step_adds_std_times_the_generators_noise_to_the_mean():
    """x' = mu + std·eps with eps the generator's standard normal draw of x's shape: the noise is scaled by the std
    itself (std ~ 0.63 and 1.0 here, so std² would differ), row by row."""
    x = torch.tensor([[1.0, -2.0, 0.5], [0.5, 0.5, -1.0]])
    v = torch.tensor([[0.3, 0.1, 0.0], [-1.0, 2.0, 0.4]])
    s, sn = torch.tensor([0.8, 0.6]), torch.tensor([0.6, 0.4])
    x1, mean, std = flow_sde_step(x, v, s, sn, 0.7, torch.Generator().manual_seed(3))
    eps = torch.randn(x.shape, generator=torch.Generator().manual_seed(3))
    assert float(std.min()) < 0.9 and not torch.allclose(std, std**2)
    torch.testing.assert_close(x1, mean + std[:, None] * eps)


def test_propagate_values_keeps_a_given_leaf_value_over_its_childrens_mean():
    """A node given a value (a leaf) keeps it even when it has children of its own with values: only nodes without
    a value of their own become the mean of their children. Root 0 -> {1, 3}, 1 -> {2}; values at 1, 2, 3 =
    [1, 5, 3]: node 1 stays 1 (not 5), the root is (1 + 3)/2 = 2."""
    parent = torch.tensor([-1, 0, 1, 0])
    depth = torch.tensor([0, 1, 2, 1])
    vals = propagate_values(parent, depth, torch.tensor([1, 2, 3]), torch.tensor([1.0, 5.0, 3.0]))
    torch.testing.assert_close(vals, torch.tensor([2.0, 1.0, 5.0, 3.0]))

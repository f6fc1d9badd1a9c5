"""trainers/tree.py, mutation round 24: behaviour the round's surviving mutants showed untested."""

from __future__ import annotations

import math

import torch

from imgalign.trainers.tree import propagate_values


def test_propagation_goes_on_above_a_depth_whose_every_leaf_is_missing():
    """Leaves may sit at several depths (propagate_values takes any tree). When every node of the deepest level
    has a missing (NaN) value, the shallower levels still propagate: root 0 -> leaf 1 (0.7) and node 2 -> leaf 3
    (NaN). The root takes leaf 1's value; stopping at the empty deepest level left every ancestor NaN."""
    node_parent = torch.tensor([-1, 0, 0, 2])
    node_depth = torch.tensor([0, 1, 1, 2])
    values = propagate_values(
        node_parent, node_depth, torch.tensor([1, 3]), torch.tensor([0.7, float("nan")])
    )
    assert math.isclose(float(values[0]), 0.7, rel_tol=1e-6)
    assert math.isclose(float(values[1]), 0.7, rel_tol=1e-6)
    assert torch.isnan(values[2]) and torch.isnan(values[3])

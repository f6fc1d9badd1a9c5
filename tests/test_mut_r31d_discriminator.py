"""Mutation round 31 (helper d): rewards/discriminator.py."""

from __future__ import annotations

import pytest

from imgalign.rewards.base import build_reward


def test_a_saved_head_of_another_size_names_the_tensor_that_does_not_fit() -> None:
    """The message quotes torch's size-mismatch line (which tensor, which shapes), not its heading
    "Error(s) in loading state_dict for FeatureHead"."""
    spec = "discriminator:features=stats,online=true,ref_size=8,hidden={h}"
    a = build_reward(spec.format(h=16))
    b = build_reward(spec.format(h=8))
    with pytest.raises(ValueError) as e:
        b.load_state_dict(a.state_dict())
    assert "does not fit this one's shape (size mismatch for net.0.weight" in str(e.value)
    assert "Error(s) in loading" not in str(e.value)

"""The tree rollout's one std per row from a step kernel's std (a plug-in kernel's included)."""

from __future__ import annotations

import pytest
import torch

from imgalign.trainers.tree import _std_rows

CPU = torch.device("cpu")


@pytest.mark.parametrize(
    "std",
    [
        torch.tensor(0.5),
        0.5,
        torch.full((3,), 0.5),
        torch.full((3, 1, 1, 1), 0.5),
        torch.full((3, 2, 4, 4), 0.5),
    ],
    ids=["0-d", "float", "[N]", "[N,1,1,1]", "[N,C,H,W] isotropic"],
)
def test_a_std_that_is_one_value_per_row_gives_that_value(std) -> None:
    assert _std_rows(std, 3, CPU).tolist() == [0.5, 0.5, 0.5]


def test_each_row_keeps_its_own_std() -> None:
    std = torch.tensor([0.1, 0.2, 0.3])[:, None, None].expand(3, 2, 2)
    assert _std_rows(std, 3, CPU).tolist() == pytest.approx([0.1, 0.2, 0.3])


def test_a_std_that_varies_within_a_row_is_refused() -> None:
    """It was cut to the row's first entry without a word (the branch log-densities then used a wrong variance)."""
    std = torch.full((3, 2), 0.5)
    std[1, 1] = 0.7
    with pytest.raises(
        ValueError, match=r"std of shape \(3, 2\) that varies within a row; the tree rollout needs"
    ):
        _std_rows(std, 3, CPU)


def test_a_std_of_another_row_count_is_refused() -> None:
    with pytest.raises(ValueError, match=r"std of shape \(2,\) for 3 rows; expected \[N\] or a scalar"):
        _std_rows(torch.ones(2), 3, CPU)

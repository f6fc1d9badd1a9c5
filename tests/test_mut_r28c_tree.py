"""Round 28c mutants of trainers/tree.py that the suite let through."""

from __future__ import annotations

import pytest
import torch

from imgalign.trainers.tree import _std_rows


def test_an_empty_std_is_refused_as_the_wrong_row_count() -> None:
    """A kernel that returns no std at all (an empty tensor) is told the row count it owes, not a reshape error."""
    with pytest.raises(ValueError, match=r"sde_step returned std of shape \(0,\) for 3 rows; expected \[N\]"):
        _std_rows(torch.tensor([]), 3, torch.device("cpu"))

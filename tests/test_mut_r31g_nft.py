"""Round 31g mutants of trainers/nft.py: EmaParams refuses a parameter list of another length."""

import pytest
import torch

from imgalign.trainers.nft import EmaParams


def test_ema_refuses_a_shorter_or_longer_parameter_list_whose_shapes_all_match() -> None:
    a = torch.nn.Parameter(torch.ones(2))
    b = torch.nn.Parameter(torch.ones(2))
    ema = EmaParams([a, b])
    with pytest.raises(ValueError, match="does not match"):
        ema.update([a], decay=0.5)
    with pytest.raises(ValueError, match="does not match"):
        with ema.applied([a, b, torch.nn.Parameter(torch.ones(2))]):
            pass
    assert all(torch.equal(s, torch.ones(2)) for s in ema.shadow)  # nothing half-updated

"""Round 31g mutants of trainers/testing.py: ClosedFormFlow decodes to images in (0, 1), as a VAE's images are."""

import torch

from imgalign.trainers.testing import ClosedFormFlow


def test_the_closed_form_flow_decodes_the_first_three_channels_through_a_sigmoid() -> None:
    x = torch.tensor([-3.0, 0.0, 3.0, 9.0]).view(1, 4, 1, 1).expand(2, 4, 2, 2)
    img = ClosedFormFlow().decode(x)
    assert img.shape == (2, 3, 2, 2)
    assert torch.allclose(img[0, :, 0, 0], torch.sigmoid(torch.tensor([-3.0, 0.0, 3.0])))
    assert float(img.min()) > 0.0 and float(img.max()) < 1.0

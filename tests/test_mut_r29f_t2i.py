"""The t2i pretraining config takes the closed ends of its [0, 1) ranges (mutation round 29)."""

import pytest

from imgalign.pretrain import t2i


@pytest.mark.parametrize("name", ["cfg_dropout", "ema"])
def test_zero_is_a_valid_cfg_dropout_and_ema(name):
    """cfg_dropout 0 (no prompt dropped: no classifier-free guidance training) and ema 0 (the shipped weights are
    the last ones) are in [0, 1), as the messages say; a check refusing 0 left every test passing."""
    t2i.Config(**{name: 0.0}).validate()
    with pytest.raises(ValueError, match=name):
        t2i.Config(**{name: -0.01}).validate()

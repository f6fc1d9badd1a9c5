"""Round 31g mutants of imgalign/pretrain/t2i.py: lr_at stays at the floor past the last step."""

import pytest

from imgalign.pretrain import t2i


def test_lr_at_stays_at_the_floor_past_the_last_step_and_does_not_rise_again() -> None:
    floor = t2i.LR_FLOOR
    for step in (100, 150, 190, 1000):
        assert t2i.lr_at(step, 2.0, 10, 100) == pytest.approx(2.0 * floor)

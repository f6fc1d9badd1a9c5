"""encoder_common.lr_at: with a single decay step the cosine reaches the floor at `total`, and with no decay steps
at all (warmup == total) the step after the warm-up is a rate between the floor and the peak, not a
ZeroDivisionError (the training loop never asks for it; lr_at is public)."""

from __future__ import annotations

import pytest

from imgalign.pretrain import encoder_common as C


def test_lr_at_one_decay_step_reaches_the_floor_at_the_last_step() -> None:
    assert C.lr_at(10, 11, 2.0, 10) == pytest.approx(2.0)
    assert C.lr_at(11, 11, 2.0, 10) == pytest.approx(0.2)


def test_lr_at_no_decay_steps_is_a_rate_after_the_warm_up_not_a_division_by_zero() -> None:
    assert C.lr_at(9, 10, 2.0, 10) == pytest.approx(2.0)
    assert 0.2 <= C.lr_at(10, 10, 2.0, 10) <= 2.0

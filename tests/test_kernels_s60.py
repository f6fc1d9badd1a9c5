"""velocity_score_scale of a CPS step with no noise (sigma' = 0, or noise level 0) is refused by name; the mutant
that let std == 0 through was killed only by a ZeroDivisionError (round 23's K34)."""

from __future__ import annotations

import pytest

from imgalign.trainers.kernels import velocity_score_scale


@pytest.mark.parametrize(("sigma_next", "noise_level"), [(0.0, 0.7), (0.5, 0.0)])
def test_a_deterministic_cps_step_has_no_score_scale(sigma_next: float, noise_level: float) -> None:
    with pytest.raises(
        ValueError, match=rf"CPS step to sigma' = {sigma_next} is deterministic: no score scale"
    ):
        velocity_score_scale("cps", 0.6, sigma_next, noise_level, 0.9)


def test_a_cps_step_with_noise_has_a_positive_score_scale() -> None:
    assert velocity_score_scale("cps", 0.6, 0.5, 0.7, 0.9) > 0

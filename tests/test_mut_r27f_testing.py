"""trainers.testing's ClosedFormFlow keeps the closed form its docstring gives (the rollout tests' expected values
rest on it): sigmas from 1 to 0 in n equal steps, v = -x/2 + 0.1 x the prompt's length."""

from __future__ import annotations

import torch

from imgalign.trainers.testing import ClosedFormFlow


def test_the_closed_form_flows_sigmas_run_from_one_to_zero_in_n_equal_steps() -> None:
    """A schedule stopping short of 0 (linspace over n + 2 points, cut to n + 1) passed every rollout test."""
    torch.testing.assert_close(ClosedFormFlow().sigmas(4), torch.tensor([1.0, 0.75, 0.5, 0.25, 0.0]))
    torch.testing.assert_close(ClosedFormFlow().sigmas(1), torch.tensor([1.0, 0.0]))


def test_the_closed_form_flows_velocity_is_minus_half_x_plus_a_tenth_of_the_prompt_length() -> None:
    flow = ClosedFormFlow()
    x = torch.full((2, 4, 4, 4), 2.0)
    v = flow.velocity(x, torch.tensor(0.5), flow.encode(["ab", "abcde"]), 1.0)
    torch.testing.assert_close(v[0], torch.full((4, 4, 4), -1.0 + 0.2))
    torch.testing.assert_close(v[1], torch.full((4, 4, 4), -1.0 + 0.5))

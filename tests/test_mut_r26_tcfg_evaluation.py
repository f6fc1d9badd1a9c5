"""Mutation round 26 (trainers/evaluation.py): edges of the prompt-dependence diagnostic no earlier test pinned."""

from __future__ import annotations

import math

import pytest
import torch

from imgalign.trainers.evaluation import prompt_dependence


def test_a_collapsed_model_that_draws_one_picture_has_ratio_zero_not_infinity() -> None:
    """A model that draws the same picture for every prompt and seed (a collapse) ignores its prompts: ratio 0
    (the reward-hacking mark), from a seed distance floored at 1e-12. A mutant dividing by the raw seed distance
    (inf where it is 0) logged inf, reading as the most prompt-dependent model possible."""
    d = prompt_dependence(torch.full((3, 2, 1, 2, 2), 0.25))
    assert d == {"prompt": 0.0, "seed": 0.0, "ratio": 0.0}


def test_seed_independent_images_give_a_large_finite_ratio() -> None:
    """Images that change with the prompt only: seed distance 0, so the ratio is the prompt distance over the
    floor 1e-12 (finite, so a tracker takes it), not inf."""
    x = torch.zeros(2, 3, 1, 1, 1)
    x[1] += 0.5  # prompt distance 0.5, seed distance 0
    d = prompt_dependence(x)
    assert d["prompt"] == pytest.approx(0.5) and d["seed"] == 0.0
    assert math.isfinite(d["ratio"]) and d["ratio"] == pytest.approx(0.5 / 1e-12)

"""Mutation round 29e: eval_inflation with nothing to measure."""

from __future__ import annotations

import pytest

import imgalign.trainers.vnorm as V
from imgalign.trainers.config import EvalConfig


def test_eval_inflation_on_a_reward_suite_without_held_out_prompts_measures_nothing(monkeypatch):
    """eval.suite=reward with no held-out prompts (every prompt trains) and vnorm_images > 0: the pool is empty, so
    eval_inflation returns {} without running any trajectory (a mutant that ran inflation_along_ode on zero prompts
    survived; with a real adapter that is a batch of zero latents)."""

    def must_not_run(*args, **kwargs):
        pytest.fail("inflation_along_ode ran on an empty prompt pool")

    monkeypatch.setattr(V, "inflation_along_ode", must_not_run)
    cfg = EvalConfig(suite="reward", vnorm_images=4)
    assert V.eval_inflation(None, None, cfg, 1.0, []) == {}

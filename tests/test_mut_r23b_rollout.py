"""Mutation round 23b (stop 60): the flat rollout's per-sample randomness on a closed-form flow adapter (no model
loads): a sample's noise follows (seed, training step, global sample id), so it is new every training step and the
same on whichever process or forward batch draws it."""

from __future__ import annotations

import torch

from imgalign.trainers.config import SamplingConfig
from imgalign.trainers.rollout import Rollout, RolloutContext, flat_rollout
from imgalign.trainers.testing import ClosedFormFlow

torch.set_num_threads(1)


def _rollout(ids: torch.Tensor, step: int = 0, seed: int = 0, **over) -> Rollout:
    cfg = SamplingConfig(**{"num_steps": 3, "group_size": 2, "sde_window": 0, **over})
    ctx = RolloutContext(ClosedFormFlow(), None, cfg, seed, step, "sum")
    return flat_rollout(ctx, ["ab"] * len(ids), [{}] * len(ids), ids, ids // cfg.group_size)


def test_every_training_step_draws_new_initial_and_sde_noise_for_the_same_samples():
    """Samples 0-3 at training steps 0 and 1: other starting noise and other SDE noise (the stored log-density
    of each SDE step, which depends only on that step's noise, differs); the same step again gives the same trajectories."""
    ids = torch.arange(4)
    s0, s1, again = _rollout(ids), _rollout(ids, step=1), _rollout(ids)
    torch.testing.assert_close(again.latents, s0.latents, rtol=0, atol=0)
    assert s0.train_steps == s1.train_steps == [0, 1]
    for b in range(4):
        assert not torch.allclose(s0.latents[b, 0], s1.latents[b, 0])
    # a step's log-density of its own draw is a function of the SDE noise alone: it moves with the noise
    assert not torch.allclose(s0.log_probs, s1.log_probs)


def test_a_samples_trajectory_follows_its_global_id_on_any_process():
    """Process 1 of 2 samples global ids 4-7: its rows equal rows 4-7 of one process sampling ids 0-7, and differ
    from process 0's rows (samples differ on every process)."""
    whole = _rollout(torch.arange(8), batch_size=3)
    second = _rollout(torch.arange(4, 8), batch_size=2)
    torch.testing.assert_close(second.latents, whole.latents[4:], rtol=0, atol=0)
    torch.testing.assert_close(second.log_probs, whole.log_probs[4:], rtol=0, atol=0)
    assert not torch.allclose(second.latents[:, 0], whole.latents[:4, 0])


def test_another_seed_gives_other_noise():
    """sampling seed 0 and 1, same step and ids: other starts."""
    ids = torch.arange(2)
    assert not torch.allclose(_rollout(ids).latents[:, 0], _rollout(ids, seed=1).latents[:, 0])

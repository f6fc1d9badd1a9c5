"""The prompt-dependence diagnostic of the trainer's evaluation (eval/prompt_dependence/*), against hand values."""

from __future__ import annotations

import pytest
import torch

from imgalign.trainers.config import ConfigError, EvalConfig
from imgalign.trainers.evaluation import prompt_dependence


def test_hand_computed_two_prompts_two_seeds():
    # images [P=2, S=2, C=1, H=1, W=1]: x[p, s]
    x = torch.tensor([[0.0, 1.0], [2.0, 4.0]]).view(2, 2, 1, 1, 1)
    d = prompt_dependence(x)
    # prompt pairs at a fixed seed: |0-2| = 2, |1-4| = 3 -> 2.5; seed pairs at a fixed prompt: |0-1| = 1, |2-4| = 2 -> 1.5
    assert d["prompt"] == pytest.approx(2.5) and d["seed"] == pytest.approx(1.5)
    assert d["ratio"] == pytest.approx(2.5 / 1.5)


def test_prompt_independent_images_give_ratio_zero():
    g = torch.Generator().manual_seed(0)
    per_seed = torch.rand(1, 3, 3, 4, 4, generator=g)
    d = prompt_dependence(per_seed.expand(5, 3, 3, 4, 4))  # every prompt draws the seed's picture
    assert d["prompt"] == 0.0 and d["seed"] > 0 and d["ratio"] == 0.0
    # mean over pixels and pairs: three prompts, pixel-wise differences of 1 between every pair of them
    x = torch.zeros(3, 2, 1, 2, 2)
    x[1] += 1
    x[2] += 2
    assert prompt_dependence(x)["prompt"] == pytest.approx((1 + 2 + 1) / 3)


def test_needs_two_prompts_and_two_seeds():
    with pytest.raises(ValueError, match="2 prompts and >= 2 seeds"):
        prompt_dependence(torch.zeros(1, 4, 3, 2, 2))
    with pytest.raises(ConfigError, match="prompt_dependence_seeds"):
        EvalConfig(prompt_dependence_seeds=1).validate()
    with pytest.raises(ConfigError, match="prompt_dependence_prompts"):
        EvalConfig(prompt_dependence_prompts=1).validate()
    EvalConfig(prompt_dependence_prompts=0, prompt_dependence_seeds=1).validate()  # off: seeds unchecked


def test_trainer_warns_when_the_ratio_halves(tmp_path, caplog):
    import json
    import logging
    from types import SimpleNamespace

    from imgalign.trainers.trainer import FlowGRPOTrainer

    key = "eval/prompt_dependence/ratio"
    (tmp_path / "eval.jsonl").write_text(json.dumps({"step": 0, key: 1.0}) + "\n")
    fake = SimpleNamespace(out=tmp_path)
    with caplog.at_level(logging.WARNING):
        FlowGRPOTrainer._warn_prompt_independence(fake, 50, {key: 0.6})  # above half: quiet
        assert "prompt-independent" not in caplog.text
        FlowGRPOTrainer._warn_prompt_independence(fake, 60, {key: 0.4})
    assert "step 60" in caplog.text and "prompt-independent" in caplog.text


def test_the_shapes_pool_takes_the_tasks_in_turn():
    """The shapes suite's prompt pool is round-robin over its tasks: any run of n_tasks consecutive prompts holds
    one prompt of every task (the prompt-dependence measurement takes the first few: several tasks, not one)."""
    from imgalign.trainers.evaluation import eval_prompt_pool, shapes_eval_set

    metas = shapes_eval_set(2)
    tag = {m["prompt"]: m["tag"] for m in metas}
    n_tasks = len({m["tag"] for m in metas})
    assert n_tasks >= 2
    pool = eval_prompt_pool(EvalConfig(suite="shapes", prompts_per_task=2), [])
    assert sorted(pool) == sorted(m["prompt"] for m in metas)
    for start in (0, n_tasks):
        assert len({tag[p] for p in pool[start : start + n_tasks]}) == n_tasks


def test_reward_suite_means_leave_out_non_finite_scores_and_rewards_with_none(monkeypatch):
    """eval/reward/<name>/mean: the mean of the finite scores; a reward with no finite score (fid before its set
    has members) has no mean at all, not a NaN or a made-up 0."""
    import imgalign.trainers.evaluation as ev
    from imgalign.rewards.base import RewardOutput

    monkeypatch.setattr(ev, "ode_sample", lambda adapter, model, ps, seeds, *a: torch.zeros(len(ps), 3, 2, 2))
    nan = float("nan")
    rewards = {
        "half": lambda im, ps, ms: RewardOutput(torch.tensor([nan, 1.0, 3.0, float("inf")])),
        "fid": lambda im, ps, ms: RewardOutput(torch.full((len(ps),), nan)),
    }
    cfg = EvalConfig(suite="reward", images_per_prompt=2)
    out, images = ev.reward_suite(None, None, cfg, 1.0, rewards, [("a", {}), ("b", {})])
    assert out == {"eval/reward/half/mean": pytest.approx(2.0)} and images.shape[0] == 4

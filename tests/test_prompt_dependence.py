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

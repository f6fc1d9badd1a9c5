"""trainers/evaluation.py (mutation round 24): the in-loop shapes suite judges image j of prompt i against prompt
i's metadata, every image of every prompt."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from imgalign.trainers.config import EvalConfig


def test_the_shapes_suite_judges_each_image_against_its_own_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    import imgalign.eval.geneval as geneval
    import imgalign.eval.shapes_detector as sd
    import imgalign.trainers.evaluation as ev

    def fake_sample(adapter, model, ps, seeds, *a):  # noqa: ANN001, ANN202
        # image k is grey level k, so the judge can tell which image it is given
        return (
            torch.arange(len(ps), dtype=torch.float32).div(255).view(-1, 1, 1, 1).expand(-1, 3, 2, 2).clone()
        )

    judged: list[tuple[int, str]] = []

    def fake_judge(img, dets, m):  # noqa: ANN001, ANN202
        judged.append((img.getpixel((0, 0))[0], m["prompt"]))
        return SimpleNamespace(correct=True, partial=1.0)

    monkeypatch.setattr(ev, "ode_sample", fake_sample)
    monkeypatch.setattr(sd, "ShapesDetector", lambda: lambda img: {})
    monkeypatch.setattr(geneval, "judge", fake_judge)
    ev.shapes_suite(None, None, EvalConfig(prompts_per_task=1, images_per_prompt=3, seed=0), 1.0)
    metas = ev.shapes_eval_set(1)
    assert judged == [(k, metas[k // 3]["prompt"]) for k in range(3 * len(metas))]


def test_the_reward_suite_means_every_reward_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    import imgalign.trainers.evaluation as ev
    from imgalign.rewards.base import RewardOutput

    monkeypatch.setattr(ev, "ode_sample", lambda adapter, model, ps, seeds, *a: torch.zeros(len(ps), 3, 2, 2))
    rewards = {
        "one": lambda im, ps, ms: RewardOutput(torch.ones(len(ps))),
        "two": lambda im, ps, ms: RewardOutput(torch.full((len(ps),), 2.0)),
    }
    out, _ = ev.reward_suite(None, None, EvalConfig(suite="reward"), 1.0, rewards, [("a", {}), ("b", {})])
    assert out == {"eval/reward/one/mean": 1.0, "eval/reward/two/mean": 2.0}

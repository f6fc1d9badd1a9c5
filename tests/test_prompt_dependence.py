"""The prompt-dependence diagnostic of the trainer's evaluation (eval/prompt_dependence/*), against hand values."""

from __future__ import annotations

import pytest
import torch

from imgalign.trainers.config import ConfigError, EvalConfig
from imgalign.trainers.evaluation import prompt_dependence, shapes_eval_set


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
    # and the seed term too is a mean over pixels: seed 1 is seed 0 plus 1 in one of the 4 pixels
    y = torch.zeros(2, 2, 1, 2, 2)
    y[:, 1, 0, 0, 0] = 1.0
    assert prompt_dependence(y)["seed"] == pytest.approx(0.25)


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
    # the base is the step-0 evaluation only: without one (eval.at_start off) an earlier trained step is none
    caplog.clear()
    (tmp_path / "eval.jsonl").write_text(json.dumps({"step": 10, key: 1.0}) + "\n")
    with caplog.at_level(logging.WARNING):
        FlowGRPOTrainer._warn_prompt_independence(fake, 60, {key: 0.4})
    assert "prompt-independent" not in caplog.text
    # a step-0 evaluation without the measurement (it was off then) is no base either, and no error
    (tmp_path / "eval.jsonl").write_text(json.dumps({"step": 0, "eval/other": 1.0}) + "\n")
    with caplog.at_level(logging.WARNING):
        FlowGRPOTrainer._warn_prompt_independence(fake, 60, {key: 0.4})
    assert "prompt-independent" not in caplog.text


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


def test_shapes_suite_seeds_each_image_and_means_the_partial_credit(monkeypatch):
    """The in-loop shapes suite: image j of eval prompt i is drawn from seed _mix(seed, i, j) (so evaluations at one
    seed stay comparable); eval/shapes/partial is the mean of the judge's partial credit, not of its verdicts."""
    from types import SimpleNamespace

    import imgalign.eval.geneval as geneval
    import imgalign.eval.shapes_detector as sd
    import imgalign.trainers.evaluation as ev

    seen = {}

    def fake_sample(adapter, model, ps, seeds, *a):
        seen.update(prompts=ps, seeds=seeds)
        return torch.zeros(len(ps), 3, 2, 2)

    monkeypatch.setattr(ev, "ode_sample", fake_sample)
    monkeypatch.setattr(sd, "ShapesDetector", lambda: lambda img: [])
    # every colors image is correct with partial 1; every other image wrong with partial 0.5
    verdict = {
        True: SimpleNamespace(correct=True, partial=1.0),
        False: SimpleNamespace(correct=False, partial=0.5),
    }
    monkeypatch.setattr(geneval, "judge", lambda img, dets, m: verdict[m["tag"] == "colors"])
    cfg = EvalConfig(prompts_per_task=2, images_per_prompt=3, seed=7)
    out, images = ev.shapes_suite(None, None, cfg, 1.0)
    metas = ev.shapes_eval_set(2)
    assert images.shape[0] == len(seen["seeds"]) == 3 * len(metas) == 36
    assert seen["seeds"] == [ev._mix(7, i, j) for i in range(len(metas)) for j in range(3)]
    assert seen["prompts"] == [m["prompt"] for m in metas for _ in range(3)]
    assert out["eval/shapes/partial"] == pytest.approx((6 * 1.0 + 30 * 0.5) / 36)
    assert out["eval/shapes/overall"] == pytest.approx(1 / 6) and out["eval/shapes/colors"] == 1.0


def test_reward_suite_seeds_image_j_of_prompt_i_with_mix_seed_i_j(monkeypatch):
    import imgalign.trainers.evaluation as ev
    from imgalign.rewards.base import RewardOutput

    seen = {}

    def fake_sample(adapter, model, ps, seeds, *a):
        seen.update(prompts=ps, seeds=seeds)
        return torch.zeros(len(ps), 3, 2, 2)

    monkeypatch.setattr(ev, "ode_sample", fake_sample)
    cfg = EvalConfig(suite="reward", images_per_prompt=2, seed=5)
    rewards = {"one": lambda im, ps, ms: RewardOutput(torch.ones(len(ps)))}
    out, _ = ev.reward_suite(None, None, cfg, 1.0, rewards, [("a", {}), ("b", {}), ("c", {})])
    assert seen["seeds"] == [ev._mix(5, i, j) for i in range(3) for j in range(2)]
    assert seen["prompts"] == ["a", "a", "b", "b", "c", "c"] and out == {"eval/reward/one/mean": 1.0}


class _ScaleAdapter:
    """x0 = the seed (one number per image) on the schedule 1, 0.5, 0; v = model(x); decode = identity."""

    device = "cpu"

    def sigmas(self, num_steps):
        return torch.linspace(1.0, 0.0, num_steps + 1)

    def init_noise(self, gens):
        return torch.tensor([[float(g.initial_seed())] for g in gens])

    def encode(self, prompts):
        return None

    def velocity(self, x, sigma, cond, guidance_scale, transformer):
        return transformer(x)

    def decode(self, x):
        return x


def test_ode_sample_takes_euler_steps_down_the_schedule_with_each_images_seed():
    """v(x) = x on sigma 1 -> 0.5 -> 0: each Euler step multiplies x by 1 + (sigma' - sigma) = 0.5, so x0 = seed
    ends at seed/4 (a reversed step would give 2.25·seed); batches of 2 keep every image's own seed."""
    from imgalign.trainers.evaluation import ode_sample

    out = ode_sample(_ScaleAdapter(), lambda x: x, ["a", "b", "c"], [4, 8, 12], 2, 1.0, batch_size=2)
    assert torch.allclose(out, torch.tensor([[1.0], [2.0], [3.0]]))


def test_reward_suite_seeds_every_image_and_returns_nothing_without_prompts(monkeypatch):
    import imgalign.trainers.evaluation as ev
    from imgalign.rewards.base import RewardOutput

    seen = {}

    def fake(adapter, model, ps, seeds, *a):
        seen["seeds"] = seeds
        return torch.zeros(len(ps), 3, 2, 2)

    rewards = {"r": lambda im, ps, ms: RewardOutput(torch.ones(len(ps)))}
    cfg = EvalConfig(suite="reward", images_per_prompt=2)
    out, images = ev.reward_suite(None, None, cfg, 1.0, rewards, [])  # the real sampler: nothing to sample
    assert out == {} and images.numel() == 0
    monkeypatch.setattr(ev, "ode_sample", fake)
    ev.reward_suite(None, None, cfg, 1.0, rewards, [("a", {}), ("b", {})])
    assert len(set(seen["seeds"])) == 4  # each image of each prompt draws its own noise


def test_eval_prompt_dependence_lays_images_out_prompt_by_seed(monkeypatch):
    """Image value = P(prompt) + S(seed) with P = 0, 10, 30 and S = 0, 1: prompt pairs differ by 10, 30, 20 (mean
    20), seed pairs by 1; duplicate prompts count once, and one distinct prompt measures nothing."""
    import imgalign.trainers.evaluation as ev

    cfg = EvalConfig(suite="reward", prompt_dependence_prompts=3, prompt_dependence_seeds=2)
    seeds = [ev._mix(cfg.seed, 20_000 + s, 0) for s in range(2)]
    P, S = {"a": 0.0, "b": 10.0, "c": 30.0}, dict(zip(seeds, (0.0, 1.0)))
    monkeypatch.setattr(
        ev,
        "ode_sample",
        lambda ad, m, ps, ss, *a: torch.tensor([P[p] + S[s] for p, s in zip(ps, ss)]).view(-1, 1, 1, 1),
    )
    tp = [("a", {}), ("a", {}), ("b", {}), ("c", {})]
    d = ev.eval_prompt_dependence(None, None, cfg, 1.0, tp)
    assert d == pytest.approx(
        {
            "eval/prompt_dependence/prompt": 20.0,
            "eval/prompt_dependence/seed": 1.0,
            "eval/prompt_dependence/ratio": 20.0,
        }
    )
    assert ev.eval_prompt_dependence(None, None, cfg, 1.0, [("a", {}), ("a", {})]) == {}


def test_prompt_dependence_refuses_a_single_seed():
    with pytest.raises(ValueError, match="2 prompts and >= 2 seeds"):
        prompt_dependence(torch.zeros(3, 1, 3, 2, 2))


class _CondAdapter(_ScaleAdapter):
    """encode: one number per prompt; v = sigma x guidance x cond (x-independent)."""

    def encode(self, prompts):
        return torch.tensor([[{"a": 1.0, "b": 2.0, "c": 3.0}[p]] for p in prompts])

    def velocity(self, x, sigma, cond, guidance_scale, transformer):
        return sigma * guidance_scale * cond


def test_ode_sample_evaluates_each_step_at_its_start_sigma_with_its_prompts_at_the_guidance_scale():
    """On 1 -> 0.5 -> 0 with v = sigma·g·c: x = seed - 0.5·(1 + 0.5)·g·c = seed - 0.75·g·c (v read at the step's end
    gives 0.25); g = 2 as given and c the image's own prompt, in every batch."""
    from imgalign.trainers.evaluation import ode_sample

    out = ode_sample(_CondAdapter(), None, ["a", "b", "c"], [4, 8, 12], 2, 2.0, batch_size=2)
    assert torch.allclose(out, torch.tensor([[4 - 1.5], [8 - 3.0], [12 - 4.5]]))


def test_every_suite_samples_at_its_steps_and_guidance_and_rewards_read_each_images_metadata(monkeypatch):
    """shapes_suite, reward_suite and eval_prompt_dependence hand cfg.num_steps and the guidance scale they are
    given to the sampler; reward_suite passes every image's metadata (the GenEval reward judges by it)."""
    import imgalign.trainers.evaluation as ev
    from imgalign.rewards.base import RewardOutput

    calls = []

    def fake(adapter, model, ps, seeds, num_steps, guidance_scale):
        calls.append((num_steps, guidance_scale))
        return torch.rand(len(ps), 3, 8, 8)

    monkeypatch.setattr(ev, "ode_sample", fake)
    seen = {}
    rewards = {"r": lambda im, ps, ms: seen.update(ms=ms) or RewardOutput(torch.ones(len(ps)))}
    cfg = EvalConfig(prompts_per_task=1, images_per_prompt=2, num_steps=3, prompt_dependence_seeds=2)
    ev.shapes_suite(None, None, cfg, 2.5)
    ev.reward_suite(None, None, cfg, 3.5, rewards, [("a", {"k": 1}), ("b", {"k": 2})])
    ev.eval_prompt_dependence(None, None, cfg, 4.5, [("a", {}), ("b", {})])
    assert calls == [(3, 2.5), (3, 3.5), (3, 4.5)]
    assert seen["ms"] == [{"k": 1}, {"k": 1}, {"k": 2}, {"k": 2}]


def test_the_shapes_subset_cycles_a_tasks_distinct_prompts_evenly():
    """single_object has 4 distinct prompts: 10 of them are those 4 in turn (3, 3, 2, 2), not the last one
    repeated."""
    ms = [m["prompt"] for m in shapes_eval_set(10) if m["tag"] == "single_object"]
    first = list(dict.fromkeys(ms))
    assert len(ms) == 10 and len(first) == 4
    assert ms == [first[i % 4] for i in range(10)]


def test_the_shapes_subset_keeps_the_files_order_within_each_task():
    """Held-out and other prompts each in file order, the held-out ones first as the file lists them (colors: 2 of
    6 held out, no prompt repeated)."""
    from imgalign.prompts.io import load_geneval_metadata
    from imgalign.prompts.shapes import EVAL_SET_PATH

    line = {}
    for i, m in enumerate(load_geneval_metadata(EVAL_SET_PATH)):
        line.setdefault(m["prompt"], i)
    for tag in ("colors", "color_attr"):
        ms = [m["prompt"] for m in shapes_eval_set(6) if m["tag"] == tag]
        assert len(set(ms)) == 6
        assert [line[p] for p in ms] == sorted(line[p] for p in ms), tag


def test_prompt_dependence_of_uint8_images_is_that_of_the_same_images_as_floats():
    """Differences are taken in float: uint8 pixels (a decoded PNG batch) would wrap around below 0."""
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (3, 2, 3, 4, 4), generator=g, dtype=torch.uint8)
    got, want = prompt_dependence(images), prompt_dependence(images.float())
    assert got == want and want["prompt"] > 0


def test_reward_suite_means_low_precision_scores_in_float32(monkeypatch):
    """A reward scoring in bfloat16 (a half-precision judge) is averaged in float32: the mean of 1, 0, 0 is 1/3, not
    bfloat16's 0.334."""
    import imgalign.trainers.evaluation as ev
    from imgalign.rewards.base import RewardOutput

    monkeypatch.setattr(ev, "ode_sample", lambda adapter, model, ps, seeds, *a: torch.zeros(len(ps), 3, 2, 2))
    rewards = {"bf16": lambda im, ps, ms: RewardOutput(torch.tensor([1.0, 0.0, 0.0], dtype=torch.bfloat16))}
    out, _ = ev.reward_suite(
        None, None, EvalConfig(suite="reward", images_per_prompt=1), 1.0, rewards, [("a", {})] * 3
    )
    assert out["eval/reward/bf16/mean"] == pytest.approx(1 / 3, rel=1e-6)

"""trainers/trainer.py, mutation round 26: the training loop (``FlowGRPOTrainer.train``) and its time budget, on
stand-in trainers whose steps do nothing, for behaviour no test pinned."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest

import imgalign.trainers.trainer as T


def _loop(max_steps: int, every: int, at_start: bool) -> list[int]:
    """The steps FlowGRPOTrainer.train evaluates after (0: the base model, before any step)."""
    evaluated: list[int] = []
    tr = SimpleNamespace(
        cfg=SimpleNamespace(
            train=SimpleNamespace(max_steps=max_steps, time_budget_min=0, unscored_stop_steps=0),
            eval=SimpleNamespace(at_start=at_start, every=every),
            log=SimpleNamespace(progress=False, checkpoint_every=0),
        ),
        start_step=0,
        is_main=True,
        acc=SimpleNamespace(wait_for_everyone=lambda: None, end_training=lambda: None),
        evaluate=lambda step: evaluated.append(step) or {},
        train_step=lambda step: {},
        _out_of_time=lambda *a: False,
        _log=lambda step, m: None,
        save=lambda step: None,
        _check_trained=lambda steps: None,
    )
    T.FlowGRPOTrainer.train(tr)
    return evaluated


def test_eval_every_minus_one_never_evaluates_not_even_the_base_model_with_eval_at_start() -> None:
    """eval.every -1 turns evaluation off, eval.at_start included: the loop that checked at_start alone evaluated the
    base model (step 0) of a run that asked for no evaluation (the whole eval suite, minutes on a real model).
    With eval.every 0 at_start still evaluates the base model first, then the last step."""
    assert _loop(3, every=-1, at_start=True) == []
    assert _loop(3, every=0, at_start=True) == [0, 3]


def test_a_time_budget_of_zero_never_stops_the_main_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """train.time_budget_min 0 means no budget: _out_of_time is False on the main process, which decides for all,
    however long the steps take. Read as a budget of 0 seconds (``budget < 0`` as the test), every run stopped after
    its first step; the existing test checked a budget of 0 only on a process other than the main one, which never
    decides."""
    monkeypatch.setattr(T.time, "perf_counter", lambda: 100.0)
    acc = SimpleNamespace(device="cpu", reduce=lambda t, reduction: t)
    tr = SimpleNamespace(
        cfg=SimpleNamespace(train=SimpleNamespace(time_budget_min=0.0)), acc=acc, is_main=True
    )
    assert not T.FlowGRPOTrainer._out_of_time(tr, 60.0, 1000.0, 1000.0)
    tr.cfg.train.time_budget_min = 1.0  # the same step with a budget of 60 s: 40 + 1000 + ... > 60
    assert T.FlowGRPOTrainer._out_of_time(tr, 60.0, 1000.0, 1000.0)


class _Stop(Exception):
    pass


def test_each_process_rolls_out_its_share_of_the_samples_with_the_prompt_and_group_of_each() -> None:
    """Sample i of a step belongs to prompt group i // group_size. Process 1 of 2 (4 samples each, 2 prompts of 4
    images) rolls out samples 4..7: all four of prompt "b", group 1, with its metadata. A loop that numbered the
    groups i % group_size handed the rollout groups 0..3, so the images of one prompt no longer shared their
    group's initial noise (the rollout draws it per group id), and the group of an image was not its prompt's."""
    seen: dict = {}

    def rollout_fn(ctx, prompts, meta, sample_ids, group_ids):
        seen.update(prompts=prompts, meta=meta, sample_ids=sample_ids.tolist(), group_ids=group_ids.tolist())
        raise _Stop

    batch = SimpleNamespace(prompts=["a", "b"], metadata=[{"k": "a"}, {"k": "b"}])
    tr = SimpleNamespace(
        cfg=SimpleNamespace(
            sampling=SimpleNamespace(group_size=4, prompts_per_step=2, samples_per_step=8, rollout="flat"),
            train=SimpleNamespace(seed=0),
            objective=SimpleNamespace(logprob_reduce="sum"),
        ),
        adapter=None,
        model=SimpleNamespace(eval=lambda: None),
        sampler=SimpleNamespace(for_step=lambda step, n: batch),
        acc=SimpleNamespace(autocast=contextlib.nullcontext),
        rollout_fn=rollout_fn,
    )
    tr._local_slice = lambda: T.FlowGRPOTrainer._local_slice(
        SimpleNamespace(layout={"samples_per_process": 4}, rank=1)
    )
    with pytest.raises(_Stop):
        T.FlowGRPOTrainer.train_step(tr, 0)
    assert seen == {
        "prompts": ["b"] * 4,
        "meta": [{"k": "b"}] * 4,
        "sample_ids": [4, 5, 6, 7],
        "group_ids": [1, 1, 1, 1],
    }


def test_a_diverged_sample_is_masked_even_when_a_reward_scores_its_image_finite() -> None:
    """A diverged sample (non-finite latents) is shown to the rewards as a NaN image; a reward may still score it
    finite (here one that reads nan_to_num'd pixels, as a classifier's argmax would). Its score is masked all the
    same, so the sample is not valid in the update and its group is normalised without it. With the masking line
    dropped, the diverged sample 1 (score 0, beside sample 0's 1.0 in its group) made its group valid and trained
    with an advantage, on latents zeroed by the mask. The reward is shown the diverged image as NaN, never as the
    black image the mask leaves in the rollout."""
    import torch

    from imgalign.rewards.base import RewardOutput
    from imgalign.trainers.rewarding import build_balancer
    from imgalign.trainers.rollout import Rollout

    captured: dict = {}

    def finite_anyway(images, prompts, metadata=None):
        captured["shown"] = images.clone()
        return RewardOutput(torch.nan_to_num(images, nan=0.0).flatten(1).mean(1))

    images = torch.tensor([1.0, 0.5, 0.25, 0.0]).view(4, 1, 1, 1).expand(4, 3, 2, 2).clone()
    diverged = torch.tensor([False, True, False, False])
    ro = Rollout(
        prompts=["a", "a", "b", "b"],
        metadata=[{}] * 4,
        sample_ids=torch.arange(4),
        group_ids=torch.tensor([0, 0, 1, 1]),
        cond=None,
        sigmas=torch.linspace(1, 0, 3),
        latents=torch.zeros(4, 3, 1),
        log_probs=torch.zeros(4, 2),
        train_steps=[0],
        images=images,
        nfe=8,
    )

    def update(step, ro_, adv, valid, per_reward):
        captured.update(adv=adv.tolist(), valid=valid.tolist())
        return {"train/empty_updates": 0.0}

    batch = SimpleNamespace(prompts=["a", "b"], metadata=[{}, {}])
    acc = SimpleNamespace(
        autocast=contextlib.nullcontext, gather=lambda t: t, device="cpu", reduce=lambda t, reduction: t
    )
    tr = SimpleNamespace(
        cfg=SimpleNamespace(
            sampling=SimpleNamespace(group_size=2, prompts_per_step=2, samples_per_step=4, rollout="flat"),
            train=SimpleNamespace(seed=0, updates_per_step=1),
            objective=SimpleNamespace(logprob_reduce="sum", std_mode="group", adv_clip=5.0),
            rewards=SimpleNamespace(balancer="weighted_sum"),
            log=SimpleNamespace(save_rollouts=False, sample_every=0),
        ),
        adapter=None,
        model=SimpleNamespace(eval=lambda: None),
        sampler=SimpleNamespace(for_step=lambda step, n: batch),
        acc=acc,
        rollout_fn=lambda ctx, prompts, meta, sample_ids, group_ids: ro,
        rewards={"finite_anyway": finite_anyway},
        reward_weights=torch.ones(1),
        scored=torch.zeros(2),
        balancer=build_balancer("weighted_sum"),
        balancing=None,
        is_main=True,
        nfe_total=0,
        idle_steps=0,
        scheduler=SimpleNamespace(get_last_lr=lambda: [1e-4]),
        _local_slice=lambda: slice(0, 4),
        _mask_diverged=lambda ro_, step: diverged,
        _update_stateful_rewards=lambda *a: None,
        _update=update,
    )
    m = T.FlowGRPOTrainer.train_step(tr, 0)
    # the reward saw the diverged image as NaN (a set-based reward would take a black one in), the others as they are
    assert captured["shown"][1].isnan().all() and captured["shown"][[0, 2, 3]].isfinite().all()
    assert captured["valid"] == [False, False, True, True]
    assert captured["adv"][:2] == [0.0, 0.0]
    assert m["reward/finite_anyway/nonfinite"] == 1.0
    assert tr.scored.tolist() == [3.0, 3.0]  # finite scores of the 3 samples that did not diverge


def test_the_base_models_own_evaluation_is_never_warned_about(tmp_path) -> None:
    """The prompt-independence warning compares a trained step's ratio with the base model's (the step-0 row of
    eval.jsonl). The step-0 evaluation is the base model itself: a run started again in a folder whose eval.jsonl
    still holds an earlier step-0 row (ratio 1.0) warned that its base model (ratio 0.4) "may be hacking the
    reward" when the step-0 check was dropped. Any later step with the same ratio is warned about."""
    import json
    import logging

    key = "eval/prompt_dependence/ratio"
    (tmp_path / "eval.jsonl").write_text(json.dumps({"step": 0, key: 1.0}) + "\n")
    host = SimpleNamespace(out=tmp_path)
    logger = logging.getLogger("imgalign.trainers.trainer")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    try:
        T.FlowGRPOTrainer._warn_prompt_independence(host, 0, {key: 0.4})
        assert records == []
        T.FlowGRPOTrainer._warn_prompt_independence(host, 1, {key: 0.4})
        assert len(records) == 1 and "prompt-independent" in records[0].getMessage()
    finally:
        logger.removeHandler(handler)


def test_train_returns_the_last_steps_metrics_and_counts_each_step_once() -> None:
    """train() (and so trainers.trainer.run, the in-process API) returns the metrics row of the last step, and
    hands _check_trained the number of steps this call ran; with train.unscored_stop_steps 2 it asks
    _nothing_trained after the second step and raises its error there. A loop that returned {} lost the row, and one
    that counted a step twice stopped a run after its first step."""
    from imgalign.trainers.trainer import NothingTrained

    calls: dict[str, list] = {"step": [], "checked": [], "asked": []}

    def host(unscored_stop_steps: int) -> SimpleNamespace:
        tr = SimpleNamespace(
            cfg=SimpleNamespace(
                train=SimpleNamespace(
                    max_steps=3, time_budget_min=0, unscored_stop_steps=unscored_stop_steps
                ),
                eval=SimpleNamespace(at_start=False, every=-1),
                log=SimpleNamespace(progress=False, checkpoint_every=0),
            ),
            start_step=0,
            is_main=True,
            acc=SimpleNamespace(wait_for_everyone=lambda: None, end_training=lambda: None),
            train_step=lambda step: calls["step"].append(step) or {"x": float(step)},
            _out_of_time=lambda *a: False,
            _log=lambda step, m: None,
            save=lambda step: None,
            _check_trained=calls["checked"].append,
            _nothing_trained=lambda ran, early: calls["asked"].append(ran) or NothingTrained("none"),
        )
        return tr

    last = T.FlowGRPOTrainer.train(host(0))
    assert last["x"] == 2.0 and "perf/sec_total" in last
    assert calls == {"step": [0, 1, 2], "checked": [3], "asked": []}
    calls.update(step=[], checked=[])
    with pytest.raises(NothingTrained):
        T.FlowGRPOTrainer.train(host(2))
    assert calls == {"step": [0, 1], "checked": [], "asked": [2]}

"""trainers/trainer.py, mutation round 28a: behaviour the round's surviving mutants showed untested."""

from __future__ import annotations

import torch

from imgalign.trainers.trainer import unscored_rewards


def test_a_single_scorable_sample_is_enough_to_name_the_reward_that_did_not_score_it() -> None:
    """Only a run where no sample could be scored (every one diverged) blames no reward: one scorable sample that
    a reward left NaN makes that reward the unscored one, as for any larger count."""
    assert unscored_rewards(["a", "b"], torch.tensor([0.0, 1.0]), 1) == ["a"]
    assert unscored_rewards(["a", "b"], torch.tensor([0.0, 0.0]), 1) == ["a", "b"]


def test_a_prompt_dependence_ratio_of_exactly_half_the_base_models_is_not_warned_about(
    tmp_path, caplog
) -> None:
    """The warning is for a ratio that fell below half the step-0 one: exactly half is quiet, just under warns."""
    import json
    import logging
    from types import SimpleNamespace

    from imgalign.trainers.trainer import FlowGRPOTrainer

    key = "eval/prompt_dependence/ratio"
    (tmp_path / "eval.jsonl").write_text(json.dumps({"step": 0, key: 0.5}) + "\n")
    fake = SimpleNamespace(out=tmp_path)
    with caplog.at_level(logging.WARNING):
        FlowGRPOTrainer._warn_prompt_independence(fake, 5, {key: 0.25})
        assert "prompt-independent" not in caplog.text
        FlowGRPOTrainer._warn_prompt_independence(fake, 6, {key: 0.2499})
    assert "step 6" in caplog.text and "prompt-independent" in caplog.text


def test_only_a_resume_from_the_runs_own_checkpoint_is_warned_about_missing_log_rows(
    tmp_path, caplog
) -> None:
    """A checkpoint of another run folder (--resume OTHER/checkpoints/step-N --output-dir NEW) starts NEW's log
    after its step: NEW has no metrics.jsonl and nothing is missing. The run's own checkpoint without its log is."""
    import logging
    from types import SimpleNamespace

    from imgalign.trainers.trainer import FlowGRPOTrainer

    new, other = tmp_path / "new", tmp_path / "other"
    for run in (new, other):
        (run / "checkpoints" / "step-000002").mkdir(parents=True)
    with caplog.at_level(logging.WARNING, logger="imgalign.trainers.trainer"):
        ckpt = other / "checkpoints" / "step-000002"
        FlowGRPOTrainer._truncate_logs(SimpleNamespace(start_step=2, resume_from=ckpt, out=new))
        assert "metrics.jsonl" not in caplog.text
        ckpt = new / "checkpoints" / "step-000002"
        FlowGRPOTrainer._truncate_logs(SimpleNamespace(start_step=2, resume_from=ckpt, out=new))
    assert "resuming from step 2, but it is not there" in caplog.text

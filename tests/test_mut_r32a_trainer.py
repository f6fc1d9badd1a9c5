"""Mutation round 32a: trainers/trainer.py's training loop and resume, where a mutant survived the earlier tests."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

from imgalign.cli import main
from imgalign.trainers.testing import one_step_config, write_config
from imgalign.trainers.trainer import FlowGRPOTrainer
from tests.conftest import resume_stub


def _budget_loop(max_steps: int, out_after: int | None) -> list[int]:
    """Run FlowGRPOTrainer.train on a trainer whose steps do nothing and whose time budget runs out after step
    `out_after` (None: never); the steps it saved."""
    saved: list[int] = []
    done = [0]
    cfg = SimpleNamespace(
        train=SimpleNamespace(max_steps=max_steps, time_budget_min=0.5, unscored_stop_steps=0),
        eval=SimpleNamespace(at_start=False, every=-1),
        log=SimpleNamespace(progress=False, checkpoint_every=0),
    )

    def train_step(step: int) -> dict[str, float]:
        done[0] = step + 1
        return {}

    tr = SimpleNamespace(
        cfg=cfg,
        start_step=0,
        is_main=True,
        acc=SimpleNamespace(wait_for_everyone=lambda: None, end_training=lambda: None),
        evaluate=lambda step: {},
        train_step=train_step,
        _out_of_time=lambda *a: out_after is not None and done[0] >= out_after,
        _log=lambda step, m: None,
        save=saved.append,
        _check_trained=lambda steps: None,
    )
    FlowGRPOTrainer.train(tr)
    return saved


def test_a_run_stopped_by_its_time_budget_says_so_and_to_resume(caplog) -> None:
    """A run the time budget stops before train.max_steps ends in success with its last checkpoint: the log says
    which step it stopped after, of how many, that train.time_budget_min stopped it and that a resume continues; a
    run that reaches train.max_steps says nothing of it."""
    with caplog.at_level(logging.INFO, logger="imgalign.trainers.trainer"):
        assert _budget_loop(5, out_after=2) == [2]
    said = [r.getMessage() for r in caplog.records if "time_budget_min" in r.getMessage()]
    assert said == ["stopping after step 2 of 5: train.time_budget_min=0.5 reached (resume to continue)"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="imgalign.trainers.trainer"):
        assert _budget_loop(3, out_after=None) == [3]
    assert "time_budget_min" not in caplog.text


def _resume_warnings(tmp_path: Path, sd3_dir: Path, first: str, then: str, caplog) -> str:
    """Train one step with prompts.source `first`, resume to step 2 with `then`: the resume's warnings."""
    tmp_path.mkdir()
    cfg = write_config(
        one_step_config(sd3_dir, tmp_path / "run", prompts={"source": first}), tmp_path / "c.yaml"
    )
    assert main(["train", str(cfg)]) == 0
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        argv = ["train", str(cfg), "--resume", "auto", "--max-steps", "2", "--set", f"prompts.source={then}"]
        assert main(argv) == 0
    return caplog.text


def test_a_prompts_source_changed_to_or_from_a_file_is_a_config_change_not_an_edited_file(
    sd3_dir, tmp_path, caplog
) -> None:
    """The prompts-file warning ("changed since checkpoint ...: restore the file") is for the same file edited
    between the checkpoint and the resume. A checkpoint of a prompts file resumed with the embedded shapes prompts
    (no file, no digest), or one of the shapes prompts resumed with a file (the checkpoint holds no digest), is a
    changed setting, named as such, and there is no file to restore."""
    prompts = tmp_path / "p.txt"
    prompts.write_text("a red circle\na blue square\n")
    said = _resume_warnings(tmp_path / "a", sd3_dir, str(prompts), "shapes", caplog)
    assert f"prompts.source: {str(prompts)!r} -> 'shapes'" in said
    assert "changed since checkpoint" not in said
    said = _resume_warnings(tmp_path / "b", sd3_dir, "shapes", str(prompts), caplog)
    assert f"prompts.source: 'shapes' -> {str(prompts)!r}" in said
    assert "changed since checkpoint" not in said


def test_a_run_that_starts_afresh_drops_the_base_model_evaluation_a_failed_start_logged(tmp_path) -> None:
    """A run that evaluated the base model (eval.at_start: eval.jsonl's step-0 row) and failed in its first step
    left no checkpoint; `--resume auto` then starts afresh and evaluates the base model again. The earlier rows go,
    step 0 included, so eval.jsonl ends with one step-0 row (keeping step 0 would leave the failed start's row
    beside the new one)."""
    (tmp_path / "eval.jsonl").write_text('{"step": 0, "eval/x": 1.0}\n{"step": 1, "eval/x": 2.0}\n')
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "train/lr": 0.1}\n')
    FlowGRPOTrainer._truncate_logs(SimpleNamespace(start_step=0, resume_from=None, out=tmp_path))
    assert (tmp_path / "eval.jsonl").read_text() == ""
    assert (tmp_path / "metrics.jsonl").read_text() == ""


def test_a_saved_lora_rank_that_is_not_a_number_leaves_the_check_to_the_weights(tmp_path) -> None:
    """_check_resume_fits reads model.lora_rank from the checkpoint's config.yaml; one it cannot read as a number
    (a hand-edited 'four', a list) is no refusal of its own, as a missing config is not: _load then compares the
    saved weights with this run's (int()'s bare "invalid literal" message named no file)."""
    import json

    ckpt = tmp_path / "checkpoints" / "step-000003"
    (ckpt / "trainer_state").mkdir(parents=True)
    (ckpt / "trainer_state" / "state.json").write_text(json.dumps({"step": 3, "num_processes": 1}))
    tr = SimpleNamespace(
        resume_from=ckpt, world=1, out=tmp_path, cfg=SimpleNamespace(model=SimpleNamespace(lora_rank=2))
    )
    for saved in ("four", "[4]"):
        (ckpt / "trainer_state" / "config.yaml").write_text(f"model: {{lora_rank: {saved}}}\n")
        assert FlowGRPOTrainer._check_resume_fits(tr) is None


def test_resume_auto_passing_over_the_only_step_folder_says_it_starts_from_the_start(
    tmp_path, caplog
) -> None:
    """--resume auto in a run whose only step folder lacks trainer_state/state.json (deleted, or still being
    copied) starts the run again: the warning says "resuming from the start", not "from None"."""
    out = tmp_path / "run"
    (out / "checkpoints" / "step-000002" / "transformer").mkdir(parents=True)
    tr = resume_stub(out)
    with caplog.at_level(logging.WARNING, logger="imgalign"):
        assert FlowGRPOTrainer._resolve_resume(tr, "auto") is None
    (said,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "step-000002 has no trainer_state/state.json" in said
    assert "resuming from the start, and this run's save of step 2 will replace it" in said

"""Bad-input round 28: output folders of another command given to `imgalign train --output-dir`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from imgalign.cli import main
from imgalign.trainers.testing import one_step_config, write_config

torch.set_num_threads(1)


@pytest.mark.parametrize(
    ("marker", "what"),
    [
        ("eval_args.json", "an `imgalign eval` output"),
        ("model_index.json", "a diffusers model folder"),
        ("config.json", "a transformers model folder"),
        ("open_clip_config.json", "an open_clip model folder"),
    ],
)
def test_train_refuses_an_output_dir_that_holds_another_commands_output(
    sd3_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], marker: str, what: str
) -> None:
    """`imgalign train --output-dir EVAL_OUT` (or a saved model's folder) trained into it: its config.yaml,
    metrics.jsonl and checkpoints/ were mixed among the evaluation's results (or the model's parts), while
    `imgalign eval --out RUN` is refused. The run is refused before any model loads, and the folder is untouched."""
    out = tmp_path / "other"
    out.mkdir()
    (out / marker).write_text(json.dumps({"suite": "shapes"}))
    (out / "summary.json").write_text("{}")
    cfg = write_config(one_step_config(sd3_dir, tmp_path / "unused"), tmp_path / "c.yaml")
    assert main(["train", str(cfg), "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--output-dir {str(out)!r} looks like {what} ({marker}), not a run folder" in err
    assert "give a new or empty --output-dir" in err
    assert sorted(p.name for p in out.iterdir()) == sorted([marker, "summary.json"])


def test_train_still_takes_a_new_folder_and_its_own_run_folder(sd3_dir: Path, tmp_path: Path) -> None:
    """The check leaves a fresh folder, and a run folder resumed (which holds config.yaml, not config.json)."""
    out = tmp_path / "run"
    cfg = write_config(one_step_config(sd3_dir, out), tmp_path / "c.yaml")
    assert main(["train", str(cfg)]) == 0
    assert main(["train", str(cfg), "--resume", "auto", "--max-steps", "2"]) == 0
    assert (out / "checkpoints" / "step-000002").is_dir()


def test_resume_of_a_moved_run_from_its_own_checkpoint_is_refused_not_trained_into_the_old_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mv runs/a runs/b`, `imgalign train runs/b/config.yaml --resume runs/b/checkpoints/step-000001`: the config
    still named runs/a, so a new run started there from b's checkpoint (re-creating runs/a), without a word, while
    the same with --resume auto was refused. Refused the same way, naming the checkpoint given."""
    from imgalign.commands.train import other_runs_config

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "runs" / "b"
    (run / "checkpoints" / "step-000001" / "trainer_state").mkdir(parents=True)
    (run / "checkpoints" / "step-000001" / "trainer_state" / "state.json").write_text("{}")
    write_config(one_step_config("shapes", "runs/a"), run / "config.yaml")
    ckpt = "runs/b/checkpoints/step-000001"
    assert main(["train", "runs/b/config.yaml", "--resume", ckpt]) == 2
    assert capsys.readouterr().err == (
        "imgalign train: error: runs/b/config.yaml is the config of run folder 'runs/b', but its log.output_dir is "
        f"'runs/a', so --resume {ckpt} would start a new run there from that checkpoint, not continue 'runs/b' (a "
        "copied run folder keeps the log.output_dir of the run it was copied from): add --output-dir runs/b to "
        "continue 'runs/b', or --output-dir runs/a to go on in that folder\n"
    )
    assert not (tmp_path / "runs" / "a").exists()
    # the run folder or its checkpoints/ given: the same; a checkpoint of another run, or a folder chosen: nothing
    for given in ("runs/b", "runs/b/checkpoints"):
        assert f"so --resume {given} would start a new run there" in str(
            other_runs_config("runs/b/config.yaml", "runs/a", given, False)
        )
    other = tmp_path / "runs" / "c"
    (other / "checkpoints" / "step-000001").mkdir(parents=True)
    write_config(one_step_config("shapes", "runs/c"), other / "config.yaml")
    assert other_runs_config("runs/b/config.yaml", "runs/a", "runs/c/checkpoints/step-000001", False) is None
    assert other_runs_config("runs/b/config.yaml", "runs/a", ckpt, True) is None

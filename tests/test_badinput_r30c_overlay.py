"""Bad-input round 30c: BASE+OVERLAY whose OVERLAY is a training run folder, its checkpoints/ or a trainer_state/."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.cli import main


def _run(tmp_path: Path) -> Path:
    """A LoRA run's layout: RUN/checkpoints/step-000001 and step-000002, each with its weights and trainer_state/."""
    run = tmp_path / "run"
    for step in ("step-000001", "step-000002"):
        ckpt = run / "checkpoints" / step
        (ckpt / "trainer_state").mkdir(parents=True)
        (ckpt / "trainer_state" / "state.json").write_text("{}\n")
        (ckpt / "pytorch_lora_weights.safetensors").write_bytes(b"")
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    return run


@pytest.mark.parametrize(
    ("part", "said"),
    [
        ("", "it is a training run folder: give one of its checkpoints, e.g. '{ckpt}'"),
        ("checkpoints", "it is a run's checkpoints folder: give one of its checkpoints, e.g. '{ckpt}'"),
        (
            "checkpoints/step-000002/trainer_state",
            "it is the training state of checkpoint '{ckpt}': give the checkpoint itself",
        ),
    ],
)
def test_an_overlay_that_is_a_run_names_the_checkpoint_to_give(
    part: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--model shapes+RUN` (or RUN/checkpoints, or a checkpoint's trainer_state/) said only which files a fine-tuned
    folder holds, while `--model RUN` alone names the run's last checkpoint. The overlay's error now names it too,
    before any model loads; nothing is written."""
    run = _run(tmp_path)
    overlay = run / part if part else run
    ckpt = run / "checkpoints" / "step-000002"
    out = tmp_path / "grid.png"
    assert (
        main(["grid", "--model", f"a=shapes+{overlay}", "--prompt", "a red square", "--out", str(out)]) == 2
    )
    err = capsys.readouterr().err
    assert f"'{overlay}' is not a fine-tuned model folder" in err
    assert said.format(ckpt=ckpt) in err
    assert not out.exists()


def test_another_folder_as_overlay_gets_no_checkpoint_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plain folder that is no run keeps the message without a checkpoint named (the hint must not guess)."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("x\n")
    assert (
        main(
            [
                "grid",
                "--model",
                f"a=shapes+{other}",
                "--prompt",
                "a red square",
                "--out",
                str(tmp_path / "g.png"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "is not a fine-tuned model folder" in err
    assert "checkpoint" not in err


@pytest.mark.parametrize("model", ["{run}", "{run}/checkpoints", "shapes+{run}"])
def test_the_checkpoint_named_is_never_a_step_old_folder(
    model: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run whose last checkpoint is being replaced holds ``step-000002.old`` beside ``step-000001``; the hint of
    `--model RUN` (and RUN/checkpoints, shapes+RUN) sorted the names and told the user to give
    ``checkpoints/step-000002.old``, a copy the trainer deletes or puts back. It names step-000001 now."""
    run = tmp_path / "run"
    (run / "checkpoints" / "step-000001").mkdir(parents=True)
    (run / "checkpoints" / "step-000002.old").mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    out = tmp_path / "grid.png"
    assert (
        main(["grid", "--model", "a=" + model.format(run=run), "--prompt", "a red square", "--out", str(out)])
        == 2
    )
    err = capsys.readouterr().err
    assert f"e.g. '{run / 'checkpoints' / 'step-000001'}'" in err
    assert ".old" not in err

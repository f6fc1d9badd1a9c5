"""Bad-input round 35h: a checkpoint folder edited by hand between `imgalign train` and `train --resume auto`: one of
its trainer_state/ files copied over another (each still reads), or a state.json value of the wrong kind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from imgalign.cli import main
from imgalign.trainers.testing import one_step_config, write_config


@pytest.fixture(scope="module")
def one_step_run(sd3_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder trained one step by the CLI (checkpoints/step-000001), copied by each test."""
    run = tmp_path_factory.mktemp("r35h") / "run"
    write_config(one_step_config(sd3_dir, run), run.parent / "c.yaml")
    assert main(["train", str(run.parent / "c.yaml")]) == 0
    return run


def resume_error(
    one_step_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], edit
) -> tuple[str, Path]:
    """Copy the run into tmp_path, `edit(its trainer_state folder)`, resume it to step 2: (stderr, the folder)."""
    run = tmp_path / "run"
    shutil.copytree(one_step_run, run)
    cfg = yaml_with_output(one_step_run.parent / "c.yaml", run, tmp_path)
    edit(run / "checkpoints" / "step-000001" / "trainer_state")
    capsys.readouterr()
    assert main(["train", str(cfg), "--resume", "auto", "--max-steps", "2"]) == 2
    return capsys.readouterr().err, run / "checkpoints" / "step-000001" / "trainer_state"


def yaml_with_output(config: Path, run: Path, tmp_path: Path) -> Path:
    import yaml

    d = yaml.safe_load(config.read_text())
    d["log"]["output_dir"] = str(run)
    return write_config(d, tmp_path / "c.yaml")


@pytest.mark.parametrize(
    "source, target, holds",
    [
        ("optimizer.pt", "scheduler.pt", "learning-rate scheduler state (KeyError: 'lr_lambdas')"),
        ("scheduler.pt", "optimizer.pt", "optimizer state (KeyError: 'param_groups')"),
        ("trainable.safetensors", "rng_0.safetensors", "torch RNG state (KeyError: 'torch_cpu')"),
        ("state.json", "rng_0.json", "Python and NumPy RNG state (KeyError: 'python')"),
    ],
)
def test_a_checkpoint_file_copied_over_another_is_named_with_what_it_lacks(
    one_step_run, tmp_path, capsys, source, target, holds
):
    """Each file still reads (a zip archive, a safetensors file, JSON), so the resume failed further on with a bare
    key name: `imgalign train: error: lr_lambdas`. It now names the file, what it should hold and what to do."""
    err, st = resume_error(
        one_step_run, tmp_path, capsys, lambda st: shutil.copyfile(st / source, st / target)
    )
    assert (
        f"error: {st / target} cannot be read (ValueError: it holds no {holds}; another file copied over it?)"
        in err
    )
    assert "restore the file from a copy, or train again" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "key, value",
    [("nfe_total", "x"), ("nfe_total", 2.5), ("prompt_position", -5), ("prompt_position", None)],
)
def test_a_hand_edited_counter_in_state_json_is_refused_naming_it(one_step_run, tmp_path, capsys, key, value):
    """`"nfe_total": "x"` failed with `error: invalid literal for int() with base 10: 'x'` (no file, no key), and a
    negative prompt_position resumed without a word (a prompts file is then walked from another permutation)."""

    def edit(st: Path) -> None:
        state = json.loads((st / "state.json").read_text())
        state[key] = value
        (st / "state.json").write_text(json.dumps(state))

    err, st = resume_error(one_step_run, tmp_path, capsys, edit)
    assert (
        f"{st / 'state.json'} cannot be read (ValueError: its {key!r} is {value!r}, not a whole number)"
        in err
    )

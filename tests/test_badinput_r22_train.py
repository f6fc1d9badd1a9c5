"""Bad-input round 22: `imgalign train` with multi-reward settings, and `imgalign eval` / `imgalign grid` on the
checkpoints of a run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from imgalign import hub
from imgalign.cli import main
from imgalign.pipelines import ModelSpec, check_model_spec
from imgalign.trainers.testing import one_step_config, write_config


@pytest.fixture
def embedded_tiny(sd3_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The tiny SD3 pipeline as an embedded model named 'tiny', in an assets folder of its own."""
    assets = tmp_path / "install" / "assets"
    shutil.copytree(sd3_dir, assets / "tiny-t2i")
    monkeypatch.setattr(hub, "ASSETS", assets)
    monkeypatch.setitem(hub.EMBEDDED, "tiny", "tiny-t2i")
    return "tiny"


@pytest.mark.parametrize("rank", [2, 0])
def test_a_checkpoint_of_an_embedded_model_records_its_name_and_loads_after_the_install_moves(
    embedded_tiny: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rank: int
) -> None:
    """A run of model.path=shapes recorded its base as the model's folder inside the imgalign install
    (.../imgalign/assets/models/shapes-t2i); with imgalign installed elsewhere (another virtual environment, a
    reinstall, the checkpoint copied to another machine) `eval --model CKPT` and `grid` refused the LoRA
    checkpoint: 'names its base model ... which cannot load'. It records the embedded name."""
    cfg = one_step_config(embedded_tiny, tmp_path / "run")
    cfg["model"]["lora_rank"] = rank
    assert main(["train", str(write_config(cfg, tmp_path / "c.yaml"))]) == 0
    ckpt = tmp_path / "run" / "checkpoints" / "step-000001"
    assert json.loads((ckpt / "imgalign_model.json").read_text())["base_model"] == "tiny"
    if rank == 0:  # a full fine-tune keeps its base's component index (found through the name)
        assert (ckpt / "model_index.json").read_text() == (
            hub.ASSETS / "tiny-t2i" / "model_index.json"
        ).read_text()
        return
    moved = tmp_path / "moved" / "assets"
    shutil.move(str(hub.ASSETS), str(moved))
    monkeypatch.setattr(hub, "ASSETS", moved)
    spec = check_model_spec(ModelSpec("x", str(ckpt)))
    assert (spec.base, spec.overlay) == ("tiny", str(ckpt))


@pytest.mark.parametrize("command", ["grid", "eval"])
def test_a_lora_checkpoint_with_an_empty_weights_file_is_refused_before_the_base_loads(
    sd3_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """A save killed (or a full disk) right after creating pytorch_lora_weights.safetensors left it empty; grid and
    eval loaded the base model, then failed with diffusers' "Unable to load weights from checkpoint file" naming no
    reason nor what to do (eval after claiming --out)."""
    ckpt = tmp_path / "run" / "checkpoints" / "step-000001"
    ckpt.mkdir(parents=True)
    (ckpt / "pytorch_lora_weights.safetensors").write_bytes(b"")
    (ckpt / "imgalign_model.json").write_text(json.dumps({"family": "sd3", "base_model": str(sd3_dir)}))
    out = tmp_path / ("g.png" if command == "grid" else "ev")
    args = ["--prompt", "a red circle"] if command == "grid" else []
    assert main([command, "--model", f"x={ckpt}", *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert (
        f"model 'x': fine-tuned folder {str(ckpt)!r} is incomplete; missing: the rest of "
        "step-000001/pytorch_lora_weights.safetensors (0 bytes there: the file is empty); use another checkpoint of "
        "the run, or save it again\n"
    ) in err
    assert not out.exists()


def test_a_checkpoints_trainer_state_folder_given_as_a_model_names_the_checkpoint(tmp_path: Path) -> None:
    """`--model RUN/checkpoints/step-N/trainer_state` (the folder --resume also takes) said only that its
    model_index.json was missing and that it was no diffusers pipeline folder."""
    from imgalign.pipelines import IncompleteModelError

    st = tmp_path / "step-000002" / "trainer_state"
    st.mkdir(parents=True)
    (st / "state.json").write_text("{}")
    with pytest.raises(IncompleteModelError) as e:
        check_model_spec(ModelSpec("x", str(st)))
    assert str(e.value) == (
        f"{str(st)!r} is the training state of checkpoint {str(st.parent)!r}, which imgalign train --resume reads, "
        f"not a model; give the checkpoint itself, {str(st.parent)!r}"
    )


def test_resume_auto_with_a_run_folders_config_naming_another_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cp -r runs/a runs/b`, edit runs/b/config.yaml, `imgalign train runs/b/config.yaml --resume auto`: the copy's
    log.output_dir still named runs/a, so the edited config continued run a and wrote its steps into it (and a hand
    edit of log.output_dir started a fresh run elsewhere, said only at INFO level)."""
    from imgalign.commands.train import other_runs_config

    monkeypatch.chdir(tmp_path)
    for name in ("a", "b"):
        (tmp_path / "runs" / name / "checkpoints").mkdir(parents=True)
        cfg = one_step_config("shapes", "runs/a")
        write_config(cfg, tmp_path / "runs" / name / "config.yaml")
    assert main(["train", "runs/b/config.yaml", "--resume", "auto"]) == 2
    assert capsys.readouterr().err == (
        "imgalign train: error: runs/b/config.yaml is the config of run folder 'runs/b', but its log.output_dir is "
        "'runs/a', so --resume auto would continue the run in that folder, writing into it, not continue 'runs/b' "
        "(a copied run folder keeps the log.output_dir of the run it was copied from): add --output-dir runs/b to "
        "continue 'runs/b', or --output-dir runs/a to go on in that folder\n"
    )
    assert not (tmp_path / "runs" / "a" / "metrics.jsonl").exists()
    # a folder that holds no run: the resume would start afresh there
    assert "so --resume auto would start a new run there, not continue 'runs/b'" in str(
        other_runs_config("runs/b/config.yaml", "runs/c", "auto", False)
    )
    # the folder chosen on the command line, the run's own folder (also through another spelling), no resume, or a
    # config outside a run folder: nothing to say
    assert other_runs_config("runs/b/config.yaml", "runs/a", "auto", True) is None
    assert other_runs_config("runs/b/config.yaml", str(tmp_path / "runs" / "b"), "auto", False) is None
    assert other_runs_config("runs/b/config.yaml", "runs/a", None, False) is None
    assert other_runs_config("runs/b/config.yaml", "runs/a", "runs/a", False) is None
    write_config(cfg, tmp_path / "config.yaml")
    assert other_runs_config("config.yaml", "runs/a", "auto", False) is None


def test_resume_of_a_run_without_config_is_refused_not_trained_with_the_default_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`imgalign train --resume runs/a` (no CONFIG) trained examples/shapes/flow_grpo.yaml's settings into
    runs/shapes_flow_grpo from run a's checkpoint, warning of a changed config with every setting the default differs
    in; its user expected run a to continue."""
    from imgalign.commands.train import default_config_resume, run_folder_of

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "runs" / "a"
    st = run / "checkpoints" / "step-000001" / "trainer_state"
    st.mkdir(parents=True)
    write_config(one_step_config("shapes", "runs/a"), run / "config.yaml")
    assert main(["train", "--resume", "runs/a/checkpoints/step-000001"]) == 2
    assert capsys.readouterr().err == (
        "imgalign train: error: --resume runs/a/checkpoints/step-000001 without CONFIG would train the default "
        "config's settings (flow_grpo.yaml) into its folder 'runs/shapes_flow_grpo', not continue 'runs/a': to "
        "continue that run with its own settings, give its config: imgalign train runs/a/config.yaml --resume "
        "runs/a/checkpoints/step-000001; to start a new run from it with the default's settings, add --output-dir "
        "NEW_FOLDER\n"
    )
    assert not (tmp_path / "runs" / "shapes_flow_grpo").exists()
    # what the refusal offers for a new run with the default's settings is taken
    import imgalign.trainers.trainer as T

    started = []
    monkeypatch.setattr(T, "run", lambda cfg, out, resume: started.append((out, resume)))
    assert main(["train", "--resume", "runs/a/checkpoints/step-000001", "--output-dir", "runs/new"]) == 0
    assert started == [("runs/new", "runs/a/checkpoints/step-000001")]
    for given in ("runs/a", "runs/a/checkpoints", str(st.parent), str(st)):
        assert run_folder_of(given).resolve() == run.resolve()
    assert run_folder_of(str(tmp_path)) is None
    # the default's own run folder resumes as before
    assert default_config_resume("runs/a", "runs/a") is None
    assert default_config_resume(str(tmp_path), "runs/shapes_flow_grpo") is None

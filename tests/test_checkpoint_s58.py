"""Checkpoint reading fixed in stop 58, on hand-made folders (no model loads)."""

from __future__ import annotations

import json

import pytest

from imgalign.trainers import checkpoint as C


def test_a_state_json_whose_step_is_not_its_folders_is_refused_naming_both(tmp_path):
    """A hand-edited (or copied) state.json saying step 1 inside step-000003 was read as step 1: a resume restarted
    at step 1 and set aside the later checkpoints, the one it resumed from among them. It is now a damaged
    checkpoint naming both steps and the earlier checkpoint to resume from; a superseded branch is checked alike,
    and a copy outside the run (any folder name) is read as written."""
    run = tmp_path / "run"
    for step in (2, 3):
        st = run / "checkpoints" / C.checkpoint_name(step) / "trainer_state"
        st.mkdir(parents=True)
        (st / "state.json").write_text(json.dumps({"step": step, "num_processes": 1, "config_hash": "x"}))
    ckpt = run / "checkpoints" / "step-000003"
    (ckpt / "trainer_state" / "state.json").write_text(json.dumps({"step": 1, "num_processes": 1}))
    with pytest.raises(C.CheckpointReadError) as e:
        C.read_state(ckpt)
    msg = " ".join(str(e.value).split())
    assert "its 'step' is 1, but the folder step-000003 is step 3" in msg
    assert f"--resume {run / 'checkpoints' / 'step-000002'}" in msg
    assert C.read_state(run / "checkpoints" / "step-000002")["step"] == 2
    branch = run / "checkpoints" / "superseded-step-000004-1"
    (branch / "trainer_state").mkdir(parents=True)
    (branch / "trainer_state" / "state.json").write_text(json.dumps({"step": 5}))
    with pytest.raises(C.CheckpointReadError, match="but the folder superseded-step-000004-1 is step 4"):
        C.read_state(branch)
    copy = tmp_path / "best"
    (copy / "trainer_state").mkdir(parents=True)
    (copy / "trainer_state" / "state.json").write_text(json.dumps({"step": 7}))
    assert C.read_state(copy) == {"step": 7}


def test_a_resume_from_a_checkpoint_whose_exported_model_is_cut_says_so(
    sd3_dir, tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    """The resume reads trainer_state/, not the exported model beside it (the weights `from_pretrained` or
    `load_lora_weights` reads): a cut copy of that file resumed without a word, and the checkpoint still looked
    whole. The resume goes on and names the file; a whole checkpoint gives no word."""
    import torch

    from imgalign.cli import main
    from imgalign.trainers.testing import metric_rows, one_step_config, write_config

    torch.set_num_threads(1)
    out = tmp_path / "run"
    cfg = one_step_config(sd3_dir, out, log={"checkpoint_every": 1, "keep_last": 3})
    cfg["train"]["max_steps"] = 2
    path = write_config(cfg, tmp_path / "c.yaml")
    assert main(["train", str(path)]) == 0
    ckpt = out / "checkpoints" / "step-000002"
    exported = [f for f in ckpt.rglob("*.safetensors") if "trainer_state" not in f.parts]
    assert exported
    whole = exported[0].read_bytes()
    exported[0].write_bytes(whole[: len(whole) // 2])
    with caplog.at_level("WARNING", logger="imgalign.trainers.trainer"):
        assert main(["train", str(path), "--resume", "auto", "--max-steps", "3"]) == 0
    said = [r.getMessage() for r in caplog.records if "exported model" in r.getMessage()]
    assert said == [
        f"checkpoint {ckpt}: its exported model is damaged ({exported[0]}); the resume reads trainer_state/ and "
        "goes on, but that folder no longer loads outside imgalign: use the next checkpoint this run writes"
    ]
    assert [r["step"] for r in metric_rows(out)] == [1, 2, 3]
    caplog.clear()
    with caplog.at_level("WARNING", logger="imgalign.trainers.trainer"):
        assert main(["train", str(path), "--resume", "auto", "--max-steps", "4"]) == 0
    assert not [r for r in caplog.records if "exported model" in r.getMessage()]

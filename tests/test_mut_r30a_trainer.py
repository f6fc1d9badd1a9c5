"""trainers/trainer.py, mutation round 30a: behaviour the round's surviving mutants showed untested."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest
from test_train import _sgd_trainer


def test_a_save_writes_over_the_hidden_folder_a_killed_save_of_its_step_left(sd3_dir, tmp_path):
    """A save killed outright (SIGKILL: no except clause runs) leaves checkpoints/.tmp-step-N; the next save of
    step N starts that folder afresh (without it: FileExistsError, or the old files published with the new)."""
    tr = _sgd_trainer(sd3_dir, tmp_path)
    left = tmp_path / "run" / "checkpoints" / ".tmp-step-000002" / "trainer_state"
    left.mkdir(parents=True)
    (left / "stale.pt").write_bytes(b"half")
    final = tr.save(2)
    assert final.name == "step-000002" and (final / "trainer_state" / "state.json").is_file()
    assert not (final / "trainer_state" / "stale.pt").exists()
    assert sorted(p.name for p in final.parent.iterdir()) == ["step-000002"]


def test_a_saved_config_that_is_not_a_mapping_is_reported_as_changed(tmp_path, caplog):
    """A checkpoint's config.yaml that parses to a list or a string (no setting to compare) is reported as a changed
    config, as one that does not parse is; the resume goes on to the weights (here missing) instead of failing
    with Python's AttributeError from the comparison."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import FlowGRPOTrainer

    out = tmp_path / "run"
    st = out / "checkpoints" / "step-000002" / "trainer_state"
    st.mkdir(parents=True)
    (st / "state.json").write_text(json.dumps({"step": 2, "config_hash": "old"}))
    tr = SimpleNamespace(cfg=load_config(FlowGRPOConfig, None, ["train.lr=0.25"]), out=out, is_main=True)
    for text in ("- model\n- train\n", "just a line\n"):
        (st / "config.yaml").write_text(text)
        caplog.clear()
        with caplog.at_level(logging.WARNING), pytest.raises(Exception, match="trainable.safetensors"):
            FlowGRPOTrainer._load(tr, st.parent)
        assert "with a changed config (see its config.yaml)" in caplog.text

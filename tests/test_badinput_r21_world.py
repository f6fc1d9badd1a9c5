"""Bad-input round 21: `imgalign world pretrain --set` values that t2i refused and the clip and vlm took."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.cli import main


@pytest.mark.parametrize("component", ["clip", "vlm"])
@pytest.mark.parametrize("setting", ["warmup=-1", "eval_every=-2"])
def test_a_negative_warmup_or_eval_every_is_refused(
    tmp_path: Path, capsys, component: str, setting: str
) -> None:
    """--set warmup=-1 trained the clip or vlm with no warm-up and eval_every=-2 evaluated every 2 steps (Python's
    modulo), exit 0, where t2i refuses both; now refused naming the key, before anything is written."""
    out = tmp_path / "pt"
    argv = ["world", "pretrain", "--component", component, "--out", str(out), "--set", setting]
    assert main([*argv, "--print-config"]) == 2  # (validated first: the test trains nothing if it is taken)
    key = setting.split("=")[0]
    err = capsys.readouterr().err
    assert f"{key} must be at least 0 (got -" in err and f"--set {key}=N" in err
    assert not out.exists()


def test_print_config_needs_no_out_and_a_run_without_out_is_refused(capsys) -> None:
    """`world pretrain --print-config` was refused by argparse without --out, though it reads no folder; a run
    without --out is still refused, by name, before anything trains."""
    import yaml

    argv = ["world", "pretrain", "--component", "clip", "--set", "steps=3"]
    assert main([*argv, "--print-config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["clip"]["steps"] == 3
    assert main(argv) == 2
    assert "--out is required: the pretraining folder" in capsys.readouterr().err

"""Bad-input round 27: training config files whose sections are given as a list, or that hold no settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.cli import main
from imgalign.config import load_config
from imgalign.trainers.config import FlowGRPOConfig
from imgalign.trainers.testing import one_step_config, write_config


@pytest.mark.parametrize(
    ("section", "value", "said"),
    [
        (
            "rewards",
            ["clip", "geneval"],
            "rewards: expected a mapping of RewardConfig fields, got ['clip', 'geneval'] (its keys: names, weights, "
            "balancer, diagnose_cosines, marble); did you mean rewards.names: ['clip', 'geneval'] (a list inside "
            "the section)?",
        ),
        (
            "prompts",
            ["a photo of a cat"],
            "prompts: expected a mapping of PromptConfig fields, got ['a photo of a cat'] (its keys: source, tasks, "
            "test_fraction, seed)\n",
        ),
    ],
)
def test_a_section_given_as_a_list_names_its_keys(
    section: str, value: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`rewards: [clip, geneval]` (the list where the section's `names` belongs) said only "expected a mapping of
    RewardConfig fields": a class name, not the keys the section takes. The keys are named, and a list of words in
    the rewards section is pointed to rewards.names (a list of prompts is not pointed at prompts.tasks)."""
    cfg = one_step_config(tmp_path / "no-model", tmp_path / "run")
    cfg[section] = value
    assert main(["train", str(write_config(cfg, tmp_path / "c.yaml"))]) == 2
    assert capsys.readouterr().err == f"imgalign train: error: {said.rstrip(chr(10))}\n"
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("text", ["", "# my settings come later\n", "{}\n"])
def test_a_config_file_without_settings_is_said(
    text: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`imgalign train EMPTY.yaml` (a file cut short, or the wrong one) trained with every built-in default, which are
    not even the recipe `imgalign train` runs without a file, without a word. It is said, naming the file."""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with caplog.at_level("WARNING", logger="imgalign.config"):
        cfg = load_config(FlowGRPOConfig, path)
    assert cfg == load_config(FlowGRPOConfig, None)
    assert [r.getMessage() for r in caplog.records] == [
        f"config file {str(path)!r} holds no settings (it is empty or only comments): every key takes its built-in "
        "default; give the config file you meant"
    ]
    caplog.clear()
    path.write_text("train: {max_steps: 2}\n")
    with caplog.at_level("WARNING", logger="imgalign.config"):
        load_config(FlowGRPOConfig, path)
    assert not caplog.records

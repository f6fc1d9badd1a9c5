"""Bad-input round 27: training config files whose sections are given as a list."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.cli import main
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

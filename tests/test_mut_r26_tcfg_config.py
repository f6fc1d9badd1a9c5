"""Mutation round 26 (trainers/config.py): cross-setting checks whose edge no earlier test pinned down."""

from __future__ import annotations

import pytest

from imgalign.config import ConfigError, load_config
from imgalign.trainers.config import FlowGRPOConfig


def test_no_held_out_prompt_is_fine_for_the_reward_suite_when_the_evaluation_is_off() -> None:
    """eval.suite=reward with prompts.test_fraction=0 is refused only while the evaluation runs (it would score no
    prompt); with eval.every=-1 nothing is scored, so the config is valid (a mutant dropping the eval.every check
    refused it, asking for a held-out share that nothing reads)."""
    sets = ["eval.suite=reward", "prompts.source=p.txt", "prompts.test_fraction=0"]
    with pytest.raises(ConfigError, match="prompts.test_fraction=0 holds out none"):
        load_config(FlowGRPOConfig, None, sets)
    load_config(FlowGRPOConfig, None, [*sets, "eval.every=-1"]).validate()


def test_an_empty_task_list_is_refused_only_for_the_shapes_generator() -> None:
    """prompts.tasks is read by the shapes generator only. With a prompt file, tasks=[] (a config that cleared the
    list) is valid; a mutant that refused an empty list whatever the source stopped a prompt-file run over a setting
    it never reads."""
    from imgalign.trainers.config import PromptConfig

    with pytest.raises(ConfigError, match="prompts.tasks is empty"):
        PromptConfig(source="shapes", tasks=[]).validate()
    PromptConfig(source="p.txt", tasks=[]).validate()
    PromptConfig(source="generate:0", tasks=[]).validate()

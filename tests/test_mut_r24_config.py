"""Mutation round 24: training-config checks whose message or edge no earlier test pinned down (a padded 'shapes',
a branch at the last step, the registry key an unknown name is reported under, the progressive note)."""

from __future__ import annotations

import pytest

from imgalign.config import ConfigError, load_config
from imgalign.trainers.config import FlowGRPOConfig, PromptConfig, check_batch_layout

TREE = [
    "sampling.rollout=tree",
    "sampling.tree.branch_factors=[2]",
    "sampling.num_steps=10",
    "sampling.group_size=8",
    "sampling.samples_per_step=8",
]


@pytest.mark.parametrize("source", [" shapes", "shapes\n", "Shapes "])
def test_a_padded_or_capitalised_shapes_source_is_refused_naming_the_spelling(source: str) -> None:
    with pytest.raises(ConfigError, match=r"is no file; the shapes-world generator is spelt 'shapes'"):
        PromptConfig(source=source).validate()


def test_a_branch_at_the_last_denoising_step_is_refused() -> None:
    """The last step is never trained (it is the ODE's): a tree branching there had no trainable edge."""
    with pytest.raises(ConfigError, match=r"range \[0, num_steps - 2 = 8\]"):
        load_config(FlowGRPOConfig, None, [*TREE, "sampling.tree.branch_steps=[0, 4, 9]"]).validate()
    load_config(FlowGRPOConfig, None, [*TREE, "sampling.tree.branch_steps=[0, 4, 8]"]).validate()


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ("objective.name=nope", "objective.name"),
        ("sampling.rollout=nope", "sampling.rollout"),
        ("rewards.balancer=nope", "rewards.balancer"),
    ],
)
def test_an_unknown_method_is_refused_under_its_own_key(setting: str, key: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{key}: unknown "):
        load_config(FlowGRPOConfig, None, [setting]).validate()


def test_the_progressive_note_is_only_for_a_progressive_tree() -> None:
    cfg = load_config(
        FlowGRPOConfig, None, [*TREE, "sampling.tree.branch_steps=[0, 3, 6]", "train.updates_per_step=8"]
    )
    with pytest.raises(ConfigError) as e:
        check_batch_layout(cfg, 1)
    assert "more than the 7 parent rows per process the updates share (1 tree(s) per process)" in str(e.value)
    assert "progressive" not in str(e.value)


def test_a_prompt_files_tasks_are_not_checked_but_listed_as_unused() -> None:
    """prompts.tasks is read by the shapes generator only: with a prompt file it is listed as unused, not refused
    (a config switched from shapes to a file with --set keeps its tasks)."""
    from imgalign.trainers.config import ignored_settings

    cfg = load_config(FlowGRPOConfig, None, ["prompts.source=my_prompts.txt", "prompts.tasks=[my_task]"])
    cfg.prompts.validate()
    assert "prompts.tasks (read with prompts.source=shapes)" in ignored_settings(cfg)
    with pytest.raises(ConfigError, match=r"prompts.tasks: unknown task\(s\) \['my_task'\]"):
        PromptConfig(tasks=["my_task"]).validate()

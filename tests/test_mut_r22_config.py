"""Training-config checks no earlier test pinned down (mutation round 22 of trainers/config.py and imgalign/config.py):
each bad value is refused before any model loads, naming the setting, and the value at the edge of the range loads."""

import re

import pytest

from imgalign.config import ConfigError, load_config
from imgalign.trainers.config import FlowGRPOConfig


@pytest.mark.parametrize(
    "bad, good, message",
    [
        # a negative alpha scaled every LoRA update by a negative factor
        (
            ["model.lora_rank=4", "model.lora_alpha=-1"],
            ["model.lora_rank=4", "model.lora_alpha=0"],
            "model.lora_alpha must be >= 0 and finite (got -1.0)",
        ),
        # LoRA of rank 1 still needs layers to attach to
        (
            ["model.lora_rank=1", "model.lora_targets=[]"],
            ["model.lora_rank=1", "model.lora_targets=[to_q]"],
            "model.lora_targets is empty",
        ),
        # the first (here the only) task is checked too
        (["prompts.tasks=[colour]"], ["prompts.tasks=[colors]"], "prompts.tasks: unknown task(s) ['colour']"),
        # fewer leaves than images per prompt left part of every group without a tree
        (
            [
                "sampling.rollout=tree",
                "sampling.tree.branch_steps=[0, 1]",
                "sampling.tree.branch_factors=[2]",
            ],
            [
                "sampling.rollout=tree",
                "sampling.tree.branch_steps=[0, 1]",
                "sampling.tree.branch_factors=[2]",
                "sampling.group_size=4",
            ],
            "sampling.tree: 4 leaves per tree (the product of branch_factors [2, 2]) but sampling.group_size=8",
        ),
    ],
)
def test_each_check_refuses_its_bad_value_and_loads_its_edge(bad, good, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(FlowGRPOConfig, None, bad)
    load_config(FlowGRPOConfig, None, good)


def test_an_override_whose_key_ends_in_a_dot_is_refused_as_an_empty_part():
    """`--set train.lr.=1e-4` (a trailing dot) names no key: refused as the other empty parts are, not read as a
    section `train.lr` holding a key ''."""
    for item in ("train.lr.=1e-4", ".train.lr=1e-4", "train..lr=1e-4"):
        with pytest.raises(ConfigError, match="has an empty part between its dots"):
            load_config(FlowGRPOConfig, None, [item])

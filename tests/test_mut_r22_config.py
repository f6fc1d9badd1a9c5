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
        # -1 read as "check only at the end" (0) silently
        (
            ["train.unscored_stop_steps=-1"],
            ["train.unscored_stop_steps=0"],
            "train.unscored_stop_steps must be >= 0",
        ),
        # a blank folder name wrote the run's files into the working folder
        (["log.output_dir='  '"], ["log.output_dir=runs/r22"], "log.output_dir is empty"),
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


def test_a_held_out_share_is_an_unused_setting_with_the_shapes_generator_even_under_the_reward_suite():
    """prompts.test_fraction splits a prompt file or generate:SEED; the shapes generator holds out colour pairs
    instead, so a changed test_fraction with prompts.source=shapes is listed as unused, whatever eval.suite says."""
    from imgalign.trainers.config import ignored_settings

    sets = ["eval.suite=reward", "eval.every=-1", "prompts.test_fraction=0.2"]
    assert "prompts.test_fraction (read with eval.suite=reward and a prompt file or generate:SEED)" in (
        ignored_settings(load_config(FlowGRPOConfig, None, sets))
    )
    filed = load_config(FlowGRPOConfig, None, [*sets, "prompts.source=generate:0"])
    assert not any(s.startswith("prompts.test_fraction") for s in ignored_settings(filed))


def test_a_base_60_number_is_refused_for_a_float_setting_too():
    """YAML 1.1 reads 1:30 as the base-60 number 90: `train.time_budget_min=1:30` was 90 minutes, not 1.5."""
    with pytest.raises(ConfigError, match="YAML reads 1:30 as the base-60 number 90"):
        load_config(FlowGRPOConfig, None, ["train.time_budget_min=1:30"])
    with pytest.raises(ConfigError, match="YAML reads 1:30 as the base-60 number 90"):
        load_config(FlowGRPOConfig, None, ["train.max_steps=1:30"])


def test_a_reward_list_may_start_with_an_item_holding_an_equals_sign():
    """A first item that looks like an option (key=value) has no spec before it to join: it is an item of its own
    (the reward registry says what it is when the rewards are built), not an IndexError; a later one joins its spec."""
    cfg = load_config(FlowGRPOConfig, None, ["rewards.names=mode=strict,geneval,weight=2"])
    assert cfg.rewards.names == ["mode=strict", "geneval,weight=2"]


def test_a_missing_top_package_of_a_dotted_user_module_says_to_put_its_folder_on_the_import_path():
    """reward 'mypkg.rewards:fn' where mypkg is not importable: the hint names the folder to put on the path, as for
    a module without dots."""
    from imgalign.config import import_user_module

    with pytest.raises(ValueError, match=r"put the folder holding 'no_such_pkg_r22' on the import path"):
        import_user_module("no_such_pkg_r22.rewards", "reward 'no_such_pkg_r22.rewards:fn'")


def test_a_user_file_beside_a_library_folder_with_a_longer_name_is_the_users(tmp_path, monkeypatch):
    """A folder is a library root only as a whole path part: a user's lib2/ next to an imgalign module's lib/ is
    the user's code (its line is the one an import error names)."""
    import sys
    import types

    from imgalign.config import _library_file

    (tmp_path / "lib").mkdir()
    (tmp_path / "lib2").mkdir()
    fake = types.ModuleType("imgalign._r22_fake")
    fake.__file__ = str(tmp_path / "lib" / "m.py")
    monkeypatch.setitem(sys.modules, "imgalign._r22_fake", fake)
    assert _library_file(str(tmp_path / "lib" / "m.py"))
    assert not _library_file(str(tmp_path / "lib2" / "u.py"))


def test_tree_rollouts_refuse_a_process_share_that_is_not_whole_trees():
    """Every tree (a prompt's group) lives on one process: 48 images of groups of 8 over 4 processes is 12 per
    process, one and a half trees, refused before any model loads; over 3 processes (16 each, two trees) it splits."""
    from imgalign.trainers.config import check_batch_layout

    cfg = load_config(FlowGRPOConfig, None, ["sampling.rollout=tree", "sampling.samples_per_step=48"])
    with pytest.raises(
        ConfigError, match="12 samples per process is not a whole number of trees of group_size=8"
    ):
        check_batch_layout(cfg, 4)
    assert check_batch_layout(cfg, 3)["samples_per_process"] == 16

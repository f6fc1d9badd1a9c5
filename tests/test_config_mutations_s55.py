"""Tests from mutation round 18 (stop 55) of imgalign/config.py and trainers/config.py: each pins a behaviour a
hand-written mutant changed without any test failing."""

import re
from dataclasses import dataclass

import pytest

from imgalign.config import ConfigError, field, leaves, load_config


@dataclass
class _Lists:
    names: tuple[str, ...] = field((), help="names, as a tuple")
    specs: list[str] = field(default_factory=list, help="reward specs", reward_specs=True)
    plain: list[str] = field(default_factory=list, help="plain strings")
    seed: int | None = field(None, help="an optional seed")


def test_a_set_list_of_strings_reads_its_items_as_a_config_files_list_does(tmp_path):
    """`--set` with a YAML list for a list of strings made each item str(item): a null item became the text 'None'
    and a mapping item the text of a dict, where the same list in a config file is refused naming the item; and a
    tuple field got a list. Both now read as the file does."""
    for sets in (["names=a,b"], ["names=[a, 12:30]"]):
        names = load_config(_Lists, None, sets).names
        assert isinstance(names, tuple) and names[0] == "a", sets
    assert load_config(_Lists, None, ["names=[a, 12:30]"]).names == ("a", "12:30")  # the text as typed
    with pytest.raises(ConfigError, match=r"names: '\[a' is not a valid YAML list"):  # not the item '[a'
        load_config(_Lists, None, ["names=[a"])
    with pytest.raises(ConfigError, match=r"plain\[1\] has no value .* remove the item"):
        load_config(_Lists, None, ["plain=[to_k, null]"])
    p = tmp_path / "c.yaml"
    for item in ("{a: 1, b: 2}", "{clip: 1, geneval: 2}"):
        with pytest.raises(ConfigError, match=r"specs\[0\]: expected a string, got \{"):
            load_config(_Lists, None, [f"specs=[{item}]"])
        p.write_text(f"specs:\n  - {item}\n")  # a file's multi-key mapping item: refused, not unpacked
        with pytest.raises(ConfigError, match=r"specs\[0\]: expected a string, got \{"):
            load_config(_Lists, p)
    # a one-key mapping item is a reward spec with its options, in both forms
    p.write_text("specs:\n  - geneval: mode=strict\n")
    assert load_config(_Lists, p).specs == ["geneval: mode=strict"]
    assert load_config(_Lists, None, ["specs=[geneval: mode=strict]"]).specs == ["geneval: mode=strict"]


def test_an_empty_set_value_for_an_optional_number_is_refused_not_taken_as_null():
    """`--set seed=` (a shell variable that was unset) is an empty text, not YAML's null: refused by name."""
    with pytest.raises(ConfigError, match="seed: expected an integer, got ''"):
        load_config(_Lists, None, ["seed="])
    assert load_config(_Lists, None, ["seed=null"]).seed is None


def test_leaves_name_every_level_of_a_nested_key():
    assert leaves({"a": {"b": {"c": 1}, "d": 2}, "e": 3}) == {"a.b.c": 1, "a.d": 2, "e": 3}


def test_train_describe_shows_the_value_of_a_key_nested_two_sections_deep(capsys):
    """`--describe` looked each key's value up by its dotted path; objective.nft.beta is three levels deep."""
    from imgalign.cli import main

    assert main(["train", "--set", "objective.nft.beta=0.25", "--describe"]) == 0
    out = capsys.readouterr().out
    assert "objective.nft.beta = 0.25  (default " in out


def test_a_number_key_given_twice_in_a_config_files_mapping_is_refused(tmp_path):
    """The duplicate-key check covers every scalar key YAML reads, not only text: `1:` twice in a mapping."""
    p = tmp_path / "c.yaml"
    p.write_text("weights:\n  1: 0.5\n  1: 0.7\n")
    with pytest.raises(ConfigError, match=r"key 1 appears twice in one mapping \(lines 2 and 3\)"):
        load_config(_Weights, p)


@dataclass
class _Weights:
    weights: dict[str, float] = field(default_factory=dict, help="weights by name")


@pytest.mark.parametrize(
    "bad, message",
    [
        (["model.family=sdxl"], "model.family: unknown model family 'sdxl'; valid: auto, sd3, flux"),
        (["model.trainable_modules=['add_[qkv_proj']"], "is not a valid regular expression"),
        (["model.max_sequence_length=513"], "model.max_sequence_length=513: the SD3 and FLUX pipelines"),
        (["model.lora_rank=4", "model.lora_alpha=inf"], "model.lora_alpha must be >= 0 and finite (got inf)"),
        (["prompts.source='  '"], "prompts.source is empty"),
        (["prompts.tasks=[counting, colour]"], "prompts.tasks: unknown task(s) ['colour']; valid tasks: "),
        (
            ["sampling.samples_per_step=12", "sampling.group_size=8"],
            "sampling.group_size=8 does not divide sampling.samples_per_step=12",
        ),
        (
            ["sampling.noise_block=2", "sampling.kernel=cps", "sampling.noise_level=0.5"],
            "sampling.noise_block > 1 is implemented for the sde kernel with flat rollouts; got kernel='cps'",
        ),
        (
            ["sampling.noise_block=2", "sampling.rollout=tree"],
            "sampling.noise_block > 1 is implemented for the sde kernel with flat rollouts; got kernel='sde', "
            "rollout='tree'",
        ),
        (
            ["sampling.sde_window=4", "sampling.sde_window_max_start=-2"],
            "sampling.sde_window_max_start must be -1 (the first half) or a step index >= 0",
        ),
        (
            ["sampling.rollout=tree", "sampling.shared_init_noise=true"],
            "sampling.shared_init_noise applies to flat rollouts",
        ),
        (
            ["sampling.rollout=tree", "sampling.group_size=4", "sampling.samples_per_step=16"],
            "sampling.tree: 8 leaves per tree (the product of branch_factors [2, 2, 2]) but sampling.group_size=4",
        ),
        (
            ["objective.name=nft", "objective.kl_beta=0.1"],
            "objective.kl_beta is the closed-form KL between the SDE transitions of objective.name=grpo",
        ),
        (["train.warmup_steps=-1"], "train.warmup_steps must be >= 0 (0 = no warm-up), got -1"),
        (["train.time_budget_min=-0.5"], "train.time_budget_min must be >= 0 (0 = no limit), got -0.5"),
        (["log.trackers=tensorboard,"], "log.trackers: 'tensorboard,' is not auto, none or a comma list of"),
        (  # float32's largest is 3.4028e38: a larger weight is inf in the trainer
            ["rewards.names=[geneval, clip]", "rewards.weights=[1, 3.5e38]"],
            "the trainer weighs rewards in float32, where a weight over 3.403e+38 is infinite",
        ),
    ],
)
def test_each_check_only_a_training_run_reached_refuses_its_first_bad_value(bad, message):
    """Checks of the training config that only a training run (after a model load) reached, or no test at its
    edge: each refuses its first bad value when the config loads, naming the setting."""
    from imgalign.trainers.config import FlowGRPOConfig

    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(FlowGRPOConfig, None, bad)


def test_the_edges_of_the_checks_only_a_training_run_reached_load(tmp_path, monkeypatch):
    """The last good value beside each refused one above; a prompt file named like the generator in another case
    is a file, not a misspelling, when it exists."""
    from imgalign.trainers.config import FlowGRPOConfig

    for sets in (
        ["model.max_sequence_length=512"],
        ["model.lora_rank=4", "model.lora_alpha=1e30"],
        ["model.trainable_modules=['add_[qkv]_proj']"],
        ["sampling.samples_per_step=16", "sampling.group_size=8"],
        ["sampling.noise_block=2"],
        ["sampling.sde_window=4", "sampling.sde_window_max_start=-1"],
        [
            "sampling.rollout=tree",
            "sampling.group_size=4",
            "sampling.tree.branch_steps=[0, 3]",
            "sampling.tree.branch_factors=[2, 2]",
        ],
        ["rewards.names=[geneval, clip]", "rewards.weights=[1, 3.4028234663852886e38]"],
    ):
        load_config(FlowGRPOConfig, None, sets)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "SHAPES").write_text("a photo of a circle\n")
    assert load_config(FlowGRPOConfig, None, ["prompts.source=SHAPES"]).prompts.source == "SHAPES"


def test_unused_settings_are_judged_for_each_built_in_balancer_and_prompt_source(tmp_path):
    """rewards.marble under gdpo (not only weighted sums) is unused; prompts.tasks is read by the shapes generator
    only; prompts.test_fraction is unused with a prompt file under eval.suite=shapes (every prompt trains)."""
    from imgalign.trainers.config import FlowGRPOConfig, ignored_settings

    def unused(*sets: str) -> list[str]:
        return ignored_settings(load_config(FlowGRPOConfig, None, list(sets)))

    assert unused("rewards.balancer=gdpo", "rewards.marble.ema=0.5") == [
        "rewards.marble.ema (read with rewards.balancer=marble)"
    ]
    assert unused("prompts.tasks=[counting]") == []
    prompts = tmp_path / "p.txt"
    prompts.write_text("a photo of a cat\na photo of a dog\n")
    assert unused(f"prompts.source={prompts}", "prompts.test_fraction=0.5") == [
        "prompts.test_fraction (read with eval.suite=reward and a prompt file or generate:SEED)"
    ]
    assert unused(f"prompts.source={prompts}", "prompts.test_fraction=0.5", "eval.suite=reward") == []


def test_a_user_module_failing_inside_importlib_names_the_last_line_outside_frozen_importlib(
    tmp_path, monkeypatch
):
    """The line named is the last one of a real file: importlib's frozen bootstrap frames are skipped."""
    from imgalign.config import import_user_module

    (tmp_path / "cfgtest_s55_frozen.py").write_text('import importlib\n\nimportlib.import_module("")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=r"raised ValueError: Empty module name \(.*\.py, line \d+\)") as e:
        import_user_module("cfgtest_s55_frozen", "reward 'cfgtest_s55_frozen:score'")
    assert "<frozen" not in str(e.value)


def test_a_user_module_importing_a_missing_module_of_a_similar_name_says_which(tmp_path, monkeypatch):
    """pkg.scorer_v2 importing a missing pkg.scorer: the missing module is not the user's own (whose name only starts
    with its text), so the error says which module imports it."""
    from imgalign.config import import_user_module

    pkg = tmp_path / "cfgtest_s55_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "scorer_v2.py").write_text("import cfgtest_s55_pkg.scorer\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=r"cfgtest_s55_pkg\.scorer_v2 imports 'cfgtest_s55_pkg\.scorer'"):
        import_user_module("cfgtest_s55_pkg.scorer_v2", "reward 'cfgtest_s55_pkg.scorer_v2:score'")


def test_a_user_module_importing_a_missing_module_of_its_own_package_is_not_told_to_pip_install_it(
    tmp_path, monkeypatch
):
    """pkg.scorer importing pkg.helpers, which the package lacks (a typo, a file not written yet), was told
    "not installed here: pip install it", which sends a user looking for a package on PyPI."""
    from imgalign.config import import_user_module

    pkg = tmp_path / "cfgtest_s55_own"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "scorer.py").write_text("import cfgtest_s55_own.helpers\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError) as e:
        import_user_module("cfgtest_s55_own.scorer", "reward 'cfgtest_s55_own.scorer:score'")
    assert (
        "cfgtest_s55_own.scorer imports 'cfgtest_s55_own.helpers', which package 'cfgtest_s55_own' does not "
        "have: check that name" in str(e.value)
    )
    assert "pip install" not in str(e.value)


def test_a_user_module_failing_inside_a_library_call_names_the_users_line(tmp_path, monkeypatch):
    """A module whose line 3 gives json a bad argument: the error named json's own file and line
    (json/decoder.py), not the user's line 3 that the docstring promises."""
    from imgalign.config import import_user_module

    (tmp_path / "cfgtest_s55_lib.py").write_text("import json\n\nW = json.loads('{')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError) as e:
        import_user_module("cfgtest_s55_lib", "reward 'cfgtest_s55_lib:score'")
    assert f"({tmp_path / 'cfgtest_s55_lib.py'}, line 3)" in str(e.value)

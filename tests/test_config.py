import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from imgalign.config import ConfigError, describe, field, load_config, to_dict


@dataclass
class Optim:
    lr: float = field(3e-4, help="learning rate")
    betas: tuple[float, float] = field((0.9, 0.999), help="Adam betas")


@dataclass
class Cfg:
    name: str = field("run", help="run name")
    steps: int = field(10, help="steps")
    mode: Literal["a", "b"] = field("a", help="mode")
    rewards: list[str] = field(default_factory=lambda: ["geneval"], help="rewards")
    weights: dict[str, float] = field(default_factory=dict, help="reward weights")
    seed: int | None = field(None, help="seed")
    optim: Optim = field(default_factory=Optim, help="optimizer")

    def validate(self) -> None:
        if self.steps < 1:
            raise ConfigError("steps must be >= 1; set steps=1 or more")


def test_yaml_and_overrides(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("name: x\noptim:\n  lr: 1.0e-3\nrewards: [clip, geneval]\n")
    cfg = load_config(Cfg, p, ["optim.lr=1e-4", "steps=5", "mode=b", "weights={clip: 0.5}", "seed=3"])
    assert cfg.name == "x" and cfg.optim.lr == pytest.approx(1e-4) and cfg.steps == 5 and cfg.mode == "b"
    assert cfg.rewards == ["clip", "geneval"] and cfg.weights == {"clip": 0.5} and cfg.seed == 3
    assert cfg.optim.betas == (0.9, 0.999)
    assert to_dict(cfg)["optim"]["betas"] == [0.9, 0.999]
    assert load_config(Cfg, None, ["rewards=clip,artifact"]).rewards == ["clip", "artifact"]
    assert load_config(Optim, None, ["betas=0.5,0.9"]).betas == (0.5, 0.9)


def test_unknown_key_lists_valid_ones(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown config key 'optim.lrr'; valid keys here: lr, betas"):
        load_config(Cfg, None, ["optim.lrr=1"])
    p = tmp_path / "c.yaml"
    p.write_text("stepz: 3\n")
    with pytest.raises(ConfigError, match="unknown config key 'stepz'; valid keys here: name, steps"):
        load_config(Cfg, p)


def test_unknown_key_of_another_section_names_where_it_lives(tmp_path):
    """A method section's key given at the wrong level (nft.beta for objective.nft.beta, tree: at the top) said only
    that the key is unknown there; the error now names the key's place(s) in the schema."""
    from imgalign.trainers.config import FlowGRPOConfig

    with pytest.raises(ConfigError, match=r"unknown config key 'nft'; .*; did you mean objective\.nft\?$"):
        load_config(FlowGRPOConfig, None, ["nft.beta=0.5"])
    with pytest.raises(ConfigError, match=r"'objective.marble'; .*; did you mean rewards\.marble\?$"):
        load_config(FlowGRPOConfig, None, ["objective.marble.ema=0.5"])
    p = tmp_path / "c.yaml"
    p.write_text("tree:\n  branch_steps: [0, 3]\nsampling:\n  adv_clip: 1\n")
    with pytest.raises(ConfigError, match=r"did you mean sampling\.tree\?$"):
        load_config(FlowGRPOConfig, p)
    p.write_text("sampling:\n  adv_clip: 1\n")
    with pytest.raises(
        ConfigError, match=r"did you mean sampling\.tree\.adv_clip, objective\.adv_clip or objective"
    ):
        load_config(FlowGRPOConfig, p)
    with pytest.raises(ConfigError, match=r"valid keys here: lr, betas$"):  # a name found nowhere: no guess
        load_config(Cfg, None, ["optim.momentum=1"])


def test_a_misspelt_key_names_the_valid_key_it_is_closest_to_before_other_sections(tmp_path):
    """A key in the wrong case, with - for _, or one letter off names the key meant at its own level; rewards.name
    (for rewards.names) was sent to objective.name, a setting of another section."""
    from imgalign.trainers.config import FlowGRPOConfig

    p = tmp_path / "c.yaml"
    for text, meant in (
        ("rewards:\n  name: [geneval]\n", "rewards.names"),
        ("train:\n  LR: 0.1\n", "train.lr"),
        ("log:\n  output-dir: x\n", "log.output_dir"),
        ("Train:\n  lr: 0.1\n", "train"),
        ("objective:\n  nft:\n    betta: 1\n", "objective.nft.beta"),
    ):
        p.write_text(text)
        with pytest.raises(ConfigError, match=rf"; did you mean {re.escape(meant)}\?$"):
            load_config(FlowGRPOConfig, p)
    with pytest.raises(
        ConfigError, match=r"'optim.lrr'; valid keys here: lr, betas; did you mean optim.lr\?$"
    ):
        load_config(Cfg, None, ["optim.lrr=1"])


def test_settings_of_an_unselected_method_are_listed_as_unused():
    """A method switched with --set keeps the old method's section; a changed value there trained nothing, silently.
    Defaults are not listed (every config has every section), nor anything under a plug-in method."""
    from imgalign.trainers.config import FlowGRPOConfig, ignored_settings

    def unused(*sets: str) -> list[str]:
        return ignored_settings(load_config(FlowGRPOConfig, None, list(sets)))

    assert unused() == []
    assert unused("objective.nft.beta=0.5", "objective.terms_per_sample=3") == [
        "objective.terms_per_sample (read with objective.name=nft)",
        "objective.nft.beta (read with objective.name=nft)",
    ]
    assert unused("objective.name=nft", "objective.nft.beta=0.5", "objective.terms_per_sample=3") == []
    assert unused("sampling.tree.between=sde") == ["sampling.tree.between (read with sampling.rollout=tree)"]
    # LoRA's options under full fine-tuning (model.lora_rank 0): the run trained every weight, silently
    assert unused("model.lora_alpha=16", "model.lora_targets=[to_q]", "model.trainable_modules=[to_q]") == [
        "model.lora_alpha (read with model.lora_rank > 0)",
        "model.lora_targets (read with model.lora_rank > 0)",
    ]
    assert unused("model.lora_rank=8", "model.lora_alpha=16", "model.lora_targets=[to_q]") == []
    # the evaluation's options with the evaluation off: eval.at_start evaluated nothing, silently
    assert unused("eval.every=-1", "eval.at_start=true", "eval.suite=reward", "eval.vnorm_images=0") == [
        "eval.at_start (read with eval.every >= 0)",
        "eval.vnorm_images (read with eval.every >= 0)",
    ]
    assert unused("eval.every=0", "eval.at_start=true", "eval.vnorm_images=0") == []
    marble = ["rewards.marble.gram=params", "rewards.marble.ema=0.5"]
    assert unused(*marble) == [
        "rewards.marble.gram (read with rewards.balancer=marble)",
        "rewards.marble.ema (read with rewards.balancer=marble)",
    ]
    # the gram space is also that of the cosine diagnostics
    assert unused(*marble, "rewards.diagnose_cosines=true") == [
        "rewards.marble.ema (read with rewards.balancer=marble)"
    ]
    assert unused(*marble, "rewards.balancer=imgalign.trainers.rewarding:marble") == []
    # nor under a plug-in objective or rollout (it may read the NFT or tree section): judged as neither built-in
    nft = ["objective.nft.beta=0.5", "objective.terms_per_sample=3"]
    assert unused("objective.name=imgalign.trainers.objectives:GRPOObjective", *nft) == []
    assert (
        unused("sampling.rollout=imgalign.trainers.rollout:flat_rollout", "sampling.tree.between=sde") == []
    )


def test_type_errors_and_validation():
    with pytest.raises(ConfigError, match="steps: expected an integer"):
        load_config(Cfg, None, ["steps=abc"])
    with pytest.raises(ConfigError, match="mode: 'c' is not one of"):
        load_config(Cfg, None, ["mode=c"])
    with pytest.raises(ConfigError, match=r"^weights: expected a mapping, got 3$"):  # not an AttributeError
        load_config(Cfg, None, ["weights=3"])
    with pytest.raises(ConfigError, match="steps must be >= 1"):
        load_config(Cfg, None, ["steps=0"])
    with pytest.raises(ConfigError, match="must look like key=value"):
        load_config(Cfg, None, ["steps"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(Cfg, "/nonexistent.yaml")
    with pytest.raises(ConfigError, match="is a folder; give a YAML config file"):
        load_config(Cfg, Path(__file__).parent)


def test_a_fractional_value_for_an_integer_setting_is_refused_not_truncated(tmp_path):
    with pytest.raises(ConfigError, match=r"^steps: expected an integer, got 2\.5$"):
        load_config(Cfg, None, ["steps=2.5"])
    p = tmp_path / "c.yaml"
    p.write_text("steps: 7.5\n")
    with pytest.raises(ConfigError, match=r"^steps: expected an integer, got 7\.5$"):
        load_config(Cfg, p)
    assert load_config(Cfg, None, ["steps=4.0"]).steps == 4  # a whole number written as a float is fine


def test_a_config_path_with_a_quoted_tilde_or_env_var_says_how_to_write_it(monkeypatch):
    """imgalign train '~/c.yaml' (quoted, or from a script) said only that the file does not exist."""
    monkeypatch.setenv("HOME", "/home/u")
    for path in ("~/c.yaml", "$HOME/c.yaml"):
        with pytest.raises(
            ConfigError, match=re.escape("does not exist (") + ".*full path, '/home/u/c.yaml'"
        ):
            load_config(Cfg, path)


def test_a_config_file_that_is_not_utf8_is_named(tmp_path):
    p = tmp_path / "lat.yaml"
    p.write_bytes(b"name: shapes \xe9\n")
    # the file named once (it was "config file X: cannot read config file X: ...")
    with pytest.raises(
        ConfigError, match=r"^cannot read config file '.*lat.yaml': it is not UTF-8 text .*UTF-8"
    ):
        load_config(Cfg, p)


def test_describe_has_help_for_every_leaf():
    rows = describe(Cfg)
    assert ("optim.lr", "0.0003", "learning rate") in rows
    assert all(h for _, _, h in rows)


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TRAIN_EXAMPLES = sorted(p for d in ("shapes", "sd35m", "flux1") for p in (EXAMPLES / d).glob("*.yaml"))


@pytest.mark.parametrize("path", TRAIN_EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_example_train_configs_validate(path, capsys):
    from imgalign.cli import main

    assert main(["train", str(path), "--print-config"]) == 0, capsys.readouterr().err
    from imgalign.trainers.config import FlowGRPOConfig, ignored_settings

    assert ignored_settings(load_config(FlowGRPOConfig, path)) == []  # every setting it changes is read


def test_multi_reward_examples_differ_only_in_the_balancer():
    """Issue 7: weighted_sum.yaml, gdpo.yaml and marble.yaml compare by changing one file name."""
    from imgalign.trainers.config import FlowGRPOConfig

    cfgs = {
        n: to_dict(load_config(FlowGRPOConfig, EXAMPLES / "shapes" / f"{n}.yaml"))
        for n in ("weighted_sum", "gdpo", "marble")
    }
    for n, c in cfgs.items():
        assert c["rewards"]["balancer"] == n and len(c["rewards"]["names"]) >= 3
        c["rewards"].pop("balancer")
        c["log"].pop("output_dir")
    assert cfgs["weighted_sum"] == cfgs["gdpo"] == cfgs["marble"]


def test_an_unquoted_no_is_the_literal_no(tmp_path):
    """YAML 1.1 reads `no` as false; a Literal field that has the choice 'no' takes it as meant."""
    from imgalign.trainers.config import FlowGRPOConfig

    cfg = load_config(FlowGRPOConfig, None, ["train.mixed_precision=no"])
    assert cfg.train.mixed_precision == "no"
    (tmp_path / "c.yaml").write_text("train:\n  mixed_precision: no\n")
    assert load_config(FlowGRPOConfig, tmp_path / "c.yaml").train.mixed_precision == "no"


def test_unquoted_yaml_bool_words_are_the_literal_choice_written(tmp_path):
    """on/off and yes/no in a YAML file reach a Literal field as the word written, whichever casing YAML takes; a
    field offering two words YAML reads as one bool is asked to quote one written in another casing, naming the
    key."""

    @dataclass
    class Switches:
        mode: Literal["on", "off", "auto"] = "auto"
        answer: Literal["No", "maybe"] = "maybe"
        both: Literal["no", "off", "x"] = "x"

    def load(text):
        (tmp_path / "s.yaml").write_text(text)
        return load_config(Switches, tmp_path / "s.yaml")

    assert load("mode: off\n").mode == "off" and load("mode: ON\n").mode == "on"
    assert load("answer: no\n").answer == "No"
    assert load_config(Switches, None, ["mode=off"]).mode == "off"
    with pytest.raises(ConfigError, match=r"answer: True is not one of"):
        load("answer: yes\n")
    # the word written, when it is a choice; another casing of two choices YAML reads as one bool is asked to quote
    assert load("both: off\n").both == "off" and load("both: no\n").both == "no"
    with pytest.raises(ConfigError, match=r"both: YAML reads an unquoted no or off as false; quote"):
        load("both: OFF\n")
    assert load("both: 'off'\n").both == "off"


def test_set_values_keep_their_text_for_string_fields(tmp_path):
    """--set (and --output-dir) values go to str fields as typed, not as YAML read them; a reward spec's options
    stay with it in a list; a bad YAML list is a config error naming the key."""
    from imgalign.trainers.config import FlowGRPOConfig

    def load(*sets):
        return load_config(FlowGRPOConfig, None, list(sets))

    assert load("log.output_dir=1e-4").log.output_dir == "1e-4"
    assert load("log.output_dir=12:30").log.output_dir == "12:30"
    assert load("log.output_dir=010").log.output_dir == "010"
    names = load("rewards.names=clip:model=ViT-B-32,pretrained=openai,geneval:mode=strict").rewards.names
    assert names == ["clip:model=ViT-B-32,pretrained=openai", "geneval:mode=strict"]
    assert load("rewards.names=[a, b]").rewards.names == ["a", "b"]
    # quotes protect a value, as in YAML: they are not part of it
    assert load("log.output_dir='runs/a b'").log.output_dir == "runs/a b"
    # a ~ from YAML or a quoted --set is not the home folder: the run went to a folder named '~' here
    home = str(Path("~/runs/a").expanduser())
    with pytest.raises(ConfigError, match=re.escape(f"not expanded: give the full path, {home!r}")):
        load("log.output_dir=~/runs/a")
    assert load("log.output_dir=runs/~a").log.output_dir == "runs/~a"
    # nor is an environment variable expanded: the run went to a folder named '$HOME' here
    with pytest.raises(
        ConfigError, match=re.escape("folder named '$HOME' in the working folder (environment")
    ):
        load("log.output_dir=$HOME/runs/a")
    with pytest.raises(ConfigError, match=re.escape("under a folder named '${RUN}' (environment variables")):
        load("log.output_dir=/data/${RUN}")
    assert load("log.output_dir=runs/cost$5").log.output_dir == "runs/cost$5"  # no variable's name
    assert load("rewards.balancer='marble'").rewards.balancer == "marble"
    assert load('rewards.names="geneval,clip"').rewards.names == ["geneval", "clip"]
    assert (
        load("train.lr=1e-4").train.lr == 1e-4
        and load("train.mixed_precision=no").train.mixed_precision == "no"
    )
    with pytest.raises(ConfigError, match=r"model.trainable_modules: .* is not a valid YAML list"):
        load("model.trainable_modules=[add_[qkv]_proj, norm1]")
    # unclosed
    with pytest.raises(ConfigError, match=r"model.trainable_modules: .* is not a valid YAML list"):
        load("model.trainable_modules=[to_q, to_k")
    # a regular expression in double quotes: YAML reads its backslash as an escape; the advice is single quotes
    with pytest.raises(
        ConfigError, match=re.escape("""in single quotes, which keep backslashes as typed: model.""")
    ):
        load(r'model.trainable_modules=["blocks\.[0-9]{1,2}\.attn"]')
    advised = r"model.trainable_modules=['blocks\.[0-9]{1,2}\.attn']"
    assert load(advised).model.trainable_modules == [r"blocks\.[0-9]{1,2}\.attn"]


def test_batch_layout_counts_each_objectives_loss_terms():
    """micro_batches_per_update (the figure examples/README.md says to copy into DeepSpeed's gradient accumulation)
    counts the objective's terms: one per trained SDE step for grpo, one per fresh (t, eps) draw for nft; a tree's
    parent rows split unevenly over updates give the largest update's count."""
    from imgalign.trainers.config import FlowGRPOConfig, check_batch_layout

    def layout(sets: list[str], procs: int = 2) -> dict:
        return check_batch_layout(load_config(FlowGRPOConfig, None, sets), procs)

    base = ["sampling.samples_per_step=8", "sampling.group_size=4", "train.micro_batch_size=2"]
    grpo = layout(base + ["sampling.sde_window=4"])
    assert grpo["samples_per_update_per_process"] == 4 and grpo["micro_batches_per_update"] == 2 * 4
    nft = layout(
        base + ["objective.name=nft", "objective.terms_per_sample=1", "objective.nft.guidance_scale=4"]
    )
    assert nft["terms_per_sample"] == 1 and nft["micro_batches_per_update"] == 2
    nft3 = layout(
        base + ["objective.name=nft", "objective.terms_per_sample=3", "objective.nft.guidance_scale=4"]
    )
    assert nft3["terms_per_sample"] == 3 and nft3["micro_batches_per_update"] == 2 * 3
    assert nft3["prompts_per_step"] == 2  # 8 samples in groups of 4
    tree = ["sampling.rollout=tree", "sampling.tree.branch_steps=[0]", "sampling.tree.branch_factors=[2]"]
    tree += ["sampling.samples_per_step=6", "sampling.group_size=2", "train.updates_per_step=2"]
    t = layout(base + tree + ["train.micro_batch_size=1"], procs=1)
    assert t["tree_parent_rows_per_process"] == 3 and t["micro_batches_per_update"] == 2  # rows 2 + 1


def test_batch_layout_splits_each_process_share_not_the_global_batch():
    """With 2 processes the per-process share must split into updates and whole trees: 6 samples are 3 per
    process (2 updates would be uneven), 4 samples in trees of 4 are half a tree per process. Without
    sampling.sde_window a grpo sample trains every SDE step but the last: num_steps - 1 terms."""
    from imgalign.trainers.config import FlowGRPOConfig, check_batch_layout

    def layout(sets: list[str], procs: int = 2) -> dict:
        return check_batch_layout(load_config(FlowGRPOConfig, None, sets), procs)

    flat = ["sampling.samples_per_step=6", "sampling.group_size=2", "train.micro_batch_size=1"]
    with pytest.raises(
        ConfigError, match=r"3 samples per process do not split into train.updates_per_step=2"
    ):
        layout(flat + ["train.updates_per_step=2"])
    assert layout(flat + ["train.updates_per_step=3"])["samples_per_update_per_process"] == 1
    tree = ["sampling.rollout=tree", "sampling.tree.branch_steps=[0]", "sampling.tree.branch_factors=[4]"]
    tree += ["sampling.samples_per_step=4", "sampling.group_size=4", "train.micro_batch_size=1"]
    with pytest.raises(
        ConfigError, match=r"rollout=tree: 2 samples per process is not a whole number of trees"
    ):
        layout(tree)
    assert layout(tree, procs=1)["tree_parent_rows_per_process"] == 1
    # 8 samples over 2 processes: one tree of 4 per process, so 1 parent row (at branch step 0) each, not 2
    assert layout(tree + ["sampling.samples_per_step=8"])["tree_parent_rows_per_process"] == 1
    with pytest.raises(ConfigError, match=r"sampling.samples_per_step=6 does not split over 4 processes"):
        layout(flat, procs=4)
    full = ["sampling.samples_per_step=8", "sampling.group_size=4", "sampling.num_steps=6"]
    full = layout(full + ["train.micro_batch_size=2"])  # 4 samples per process, 2 micro-batches x 5 steps
    assert full["trained_steps_per_sample"] == 5 and full["micro_batches_per_update"] == 2 * 5


def test_tree_updates_beyond_the_parent_rows_are_refused():
    """Tree updates split the parent rows (one per node at a branch step), not the samples: 8 updates of 1 tree with
    7 parent rows (1 + 2 + 4) left one update empty, reported as 'no valid sample'. A progressive tree starts with
    one branch step (1 row per tree). check_batch_layout (the preflight, before any model loads) refuses both, naming
    the bound to set."""
    from imgalign.trainers.config import FlowGRPOConfig, check_batch_layout

    tree = [
        "sampling.rollout=tree",
        "sampling.tree.branch_steps=[0, 3, 6]",
        "sampling.tree.branch_factors=[2]",
    ]
    tree += ["sampling.num_steps=10", "sampling.group_size=8", "sampling.samples_per_step=8"]

    def layout(sets: list[str]) -> dict:
        return check_batch_layout(load_config(FlowGRPOConfig, None, tree + sets), 1)

    with pytest.raises(
        ConfigError, match=r"train.updates_per_step=8 is more than the 7 parent rows.*updates_per_step <= 7"
    ):
        layout(["train.updates_per_step=8"])
    four = layout(["train.updates_per_step=4"])
    assert four["tree_parent_rows_per_process"] == 7
    assert four["tree_trained_edges_per_tree"] == 1 * 2 + 2 * 2 + 4 * 2  # every parent row branches in 2
    prog = ["sampling.samples_per_step=16", "sampling.tree.progressive=true"]
    with pytest.raises(ConfigError, match=r"more than the 2 parent rows .* at the first step .*progressive"):
        layout(prog + ["train.updates_per_step=4"])
    assert layout(prog + ["train.updates_per_step=2"])["tree_parent_rows_per_process"] == 14


def test_reward_weights_that_would_do_nothing_are_refused():
    """rewards.weights all 0 would zero every advantage; under rewards.balancer=marble the weights were silently
    ignored (MARBLE weighs the rewards by their gradients). Both are config errors, before any model loads."""
    from imgalign.trainers.config import FlowGRPOConfig

    two = "rewards.names=[geneval:mode=partial, clip]"
    with pytest.raises(
        ConfigError, match=r"rewards.weights .* no effect with rewards.balancer=marble.*remove"
    ):
        load_config(FlowGRPOConfig, None, [two, "rewards.balancer=marble", "rewards.weights=[1, 0.5]"])
    with pytest.raises(ConfigError, match=r"rewards.weights are all 0.*at least one weight > 0"):
        load_config(FlowGRPOConfig, None, [two, "rewards.weights=[0, 0]"])
    assert load_config(FlowGRPOConfig, None, [two, "rewards.weights=[0, 2]"]).rewards.weights == [0.0, 2.0]
    assert load_config(FlowGRPOConfig, None, [two, "rewards.balancer=marble"]).rewards.weights == []


def test_nan_and_out_of_range_optimiser_settings_are_config_errors(tmp_path):
    """NaN passed every `x <= 0` check (train.lr=nan failed in torch after the model loaded); AdamW's betas, eps
    and weight decay, the clip settings and the trackers are checked before any model loads."""
    from imgalign.trainers.config import FlowGRPOConfig

    with pytest.raises(ConfigError, match=r"optim.lr: expected a number, got .*nan.* \(not a number\)"):
        load_config(Cfg, None, ["optim.lr=nan"])
    (tmp_path / "c.yaml").write_text("optim:\n  lr: .nan\n")
    with pytest.raises(ConfigError, match="optim.lr: expected a number"):
        load_config(Cfg, tmp_path / "c.yaml")
    for override, msg in [
        ("train.lr=nan", "train.lr: expected a number"),
        ("objective.kl_beta=nan", "objective.kl_beta: expected a number"),
        ("train.lr=inf", r"train.lr must be > 0 and finite \(got inf\)"),
        ("train.adam_beta1=1.5", r"train.adam_beta1 must be in \[0, 1\) \(got 1.5\)"),
        ("train.adam_beta2=1", r"train.adam_beta2 must be in \[0, 1\)"),
        ("train.adam_beta1=-0.1", r"train.adam_beta1 must be in \[0, 1\)"),
        ("train.adam_eps=0", "train.adam_eps must be > 0 and finite"),
        ("train.weight_decay=-1", "train.weight_decay must be >= 0 and finite"),
        ("train.grad_clip=inf", r"train.grad_clip must be >= 0 and finite \(0 = no clipping"),
        ("objective.clip_range=inf", "objective.clip_range must be > 0 and finite"),
        ("objective.terms_per_sample=0", r"objective.terms_per_sample must be >= 1 \(got 0\)"),
        ("objective.terms_per_sample=-1", r"objective.terms_per_sample must be >= 1 \(got -1\)"),
        (
            "log.trackers=foo",
            "log.trackers: 'foo' is not auto, none or a comma list of all, aim, tensorboard",
        ),
        ("log.trackers=tensorboard,foo", "log.trackers: 'tensorboard,foo' is not"),
        ("log.trackers=none,wandb", "log.trackers: 'none,wandb' is not"),
    ]:
        with pytest.raises(ConfigError, match=msg):
            load_config(FlowGRPOConfig, None, [override])
    cfg = load_config(
        FlowGRPOConfig, None, ["log.trackers=tensorboard,wandb", "train.grad_clip=0", "train.adam_beta1=0"]
    )
    assert cfg.log.trackers == "tensorboard,wandb" and cfg.train.grad_clip == 0
    # every name accelerate accepts (its LoggerType), spaces after the commas, and none
    for names in ("all", "trackio", "swanlab,tensorboard", "tensorboard, wandb", "none"):
        assert load_config(FlowGRPOConfig, None, [f"log.trackers={names}"]).log.trackers == names


def test_a_negative_or_too_large_seed_is_refused_in_configs_and_on_the_command_line(tmp_path, capsys):
    """A negative seed aliased another silently (Python's random takes |seed|, torch wraps it modulo 2**64), and -1
    drew no random seed as it does in some tools: train.seed, prompts.seed, eval.seed, the pretraining configs'
    seed and every --seed option refuse one; 0 and 2**63 - 1 pass."""
    from imgalign.cli import main
    from imgalign.pretrain import clip, t2i, vlm
    from imgalign.trainers.config import FlowGRPOConfig

    for key in ("train.seed", "prompts.seed", "eval.seed"):
        with pytest.raises(
            ConfigError, match=rf"^{key} must be an integer from 0 to 2\*\*63 - 1 \(got -1; -1 draws"
        ):
            load_config(FlowGRPOConfig, None, [f"{key}=-1"])
        with pytest.raises(ConfigError, match=rf"^{key} must be .* \(got {2**63}\): give one, e.g. 0"):
            load_config(FlowGRPOConfig, None, [f"{key}={2**63}"])
        assert load_config(FlowGRPOConfig, None, [f"{key}={2**63 - 1}"])
    for mod in (t2i, clip, vlm):
        with pytest.raises(ValueError, match=r"^seed must be an integer from 0"):
            mod.Config(seed=-3).validate()
    for argv in (
        ["eval", "--ground-truth", "--seed", "-1", "--out", str(tmp_path / "o")],
        ["world", "render", "--seed", "-1", "--out", str(tmp_path / "o")],
        ["rewards", "check", "--reward", "clip", "--seed", "x1"],
    ):
        with pytest.raises(SystemExit) as exc:  # argparse's usage error, as for any bad option value
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "argument --seed: " in err and (
            "a seed must be an integer from 0" in err or "'x1' is not" in err
        )
    assert not (tmp_path / "o").exists()


def test_a_rewards_options_as_a_block_mapping_under_its_name_are_its_spec(tmp_path):
    """`- geneval:` with `mode: strict` under it (YAML's block form of a reward's options) was refused as a reward
    option "{'mode': 'strict'}"; it is the spec geneval:mode=strict, scalars written as YAML writes them. A value
    that is no scalar (a list) is still refused, naming the spec."""
    from imgalign.trainers.config import FlowGRPOConfig

    y = tmp_path / "c.yaml"
    y.write_text(
        "rewards:\n  names:\n    - geneval:\n        mode: strict\n    - clip:\n        batch_size: 2\n"
        "        model: shapes\n    - vlm_loglik\n"
    )
    names = load_config(FlowGRPOConfig, y, []).rewards.names
    assert names == ["geneval:mode=strict", "clip:batch_size=2,model=shapes", "vlm_loglik"]
    y.write_text("rewards:\n  names:\n    - geneval:\n        mode: [strict]\n")
    assert load_config(FlowGRPOConfig, y, []).rewards.names == ["geneval: {'mode': ['strict']}"]
    from imgalign.cli import main

    assert main(["train", str(y), "--print-config"]) == 2  # (the reward spec check names it)


def test_a_reward_spec_keeps_its_options_in_every_list_form(tmp_path):
    """`a,b` and `[a, b]` in --set and in a YAML file: a spec's key=value options stay with it, and YAML's reading
    of an unquoted `geneval: mode=strict` (a mapping) is the spec as written (they were split into two rewards,
    'weight=3' among them, or the mapping's repr)."""
    from imgalign.trainers.config import FlowGRPOConfig

    spec = "clip:model=shapes-clip,weight=3"

    def names(sets: list[str], path: Path | None = None) -> list[str]:
        return load_config(FlowGRPOConfig, path, sets).rewards.names

    assert names([f"rewards.names={spec}"]) == [spec]
    assert names([f"rewards.names=[{spec}, geneval]"]) == [spec, "geneval"]
    assert names(["rewards.names=[geneval: mode=strict]"]) == ["geneval: mode=strict"]
    y = tmp_path / "c.yaml"
    y.write_text(f'rewards:\n  names: "{spec}"\n')
    assert names([], y) == [spec]
    y.write_text("rewards:\n  names: [geneval: mode=strict, clip]\n")
    assert names([], y) == ["geneval: mode=strict", "clip"]
    assert load_config(FlowGRPOConfig, None, ["prompts.tasks=[counting, position]"]).prompts.tasks == [
        "counting",
        "position",
    ]
    # only reward specs join: a regex with '=' (a lookahead) in another list stays its own item
    regexes = ["norm1_context", "attn(?=\\.to_q)", "ff_context"]
    y.write_text("model:\n  trainable_modules: ['norm1_context', 'attn(?=\\.to_q)', 'ff_context']\n")
    assert load_config(FlowGRPOConfig, y, []).model.trainable_modules == regexes
    sets = ["model.trainable_modules=['norm1_context', 'attn(?=\\.to_q)', 'ff_context']"]
    assert load_config(FlowGRPOConfig, None, sets).model.trainable_modules == regexes
    y.write_text(
        'model:\n  trainable_modules: "[qk]_proj, ff_context, null"\n'
    )  # no YAML inside: items as written
    assert load_config(FlowGRPOConfig, y, []).model.trainable_modules == ["[qk]_proj", "ff_context", "null"]
    sets = ["model.trainable_modules=norm1_context,attn(?=x)"]
    assert load_config(FlowGRPOConfig, None, sets).model.trainable_modules == ["norm1_context", "attn(?=x)"]


def test_a_comma_inside_a_reward_options_quotes_or_brackets_stays_with_it(tmp_path):
    """An unbracketed `--set rewards.names=...` (or a YAML string) split at every comma, even inside an option's
    quotes: `vlm_loglik:query="a, b"` became the specs `vlm_loglik:query="a` and `b"`. Only top-level commas
    split now, as in the bracketed form and in the reward's own option parser."""
    from imgalign.rewards.base import parse_reward_spec
    from imgalign.trainers.config import FlowGRPOConfig

    spec = 'vlm_loglik:query="a, b"'
    both = [spec, "clip:model=X,pretrained=openai", "geneval:mode=strict,labels=[x, y]"]
    sets = [f"rewards.names={','.join(both)}"]
    assert load_config(FlowGRPOConfig, None, sets).rewards.names == both
    y = tmp_path / "c.yaml"
    y.write_text(f"rewards:\n  names: '{spec},geneval'\n")
    assert load_config(FlowGRPOConfig, y, []).rewards.names == [spec, "geneval"]
    assert parse_reward_spec(spec) == ("vlm_loglik", {"query": "a, b"})
    # an unclosed quote closes nothing: every comma splits, as before
    assert load_config(FlowGRPOConfig, None, ['rewards.names=a:q="x,b']).rewards.names == ['a:q="x', "b"]


def test_top_level_split_opens_quotes_only_at_a_value_and_counts_braces():
    """A quote opens only where a value starts (after `=`, spaces allowed), so an apostrophe inside a value does
    not swallow the rest; `{...}` nests like `[...]`."""
    from imgalign.config import split_top_level

    assert split_top_level('a=it\'s,b="x, y"') == ["a=it's", 'b="x, y"']
    assert split_top_level('a= "x, y",b=1') == ['a= "x, y"', "b=1"]
    assert split_top_level("a={x: 1, y: 2},b=3") == ["a={x: 1, y: 2}", "b=3"]


def test_scalars_and_keys_of_the_wrong_shape(tmp_path):
    """1e3 for an integer setting is the integer 1000 (YAML 1.1 reads it as a string); a scalar for a list is a
    config error naming the key; a list as a YAML key is invalid YAML, not a TypeError."""
    from imgalign.trainers.config import FlowGRPOConfig

    steps = load_config(FlowGRPOConfig, None, ["train.max_steps=1e3"]).train.max_steps
    assert steps == 1000 and type(steps) is int
    with pytest.raises(ConfigError, match="rewards.weights: expected a list, got 3"):
        load_config(FlowGRPOConfig, None, ["rewards.weights=3"])
    # weights by reward name: the error says the list holds one weight per reward (their order is rewards.names')
    with pytest.raises(
        ConfigError, match=r"rewards.weights is a list: one weight per reward, in the order of rewards.names"
    ):
        load_config(
            FlowGRPOConfig, None, ["rewards.names=[geneval, clip]", "rewards.weights={geneval: 1, clip: 2}"]
        )
    # the same mapping written in a config file (a plain dict, not an override's text), and a tuple setting
    w = tmp_path / "w.yaml"
    w.write_text("rewards:\n  names: [geneval, clip]\n  weights: {geneval: 1, clip: 2}\n")
    with pytest.raises(ConfigError, match=r"rewards.weights is a list: one weight per reward"):
        load_config(FlowGRPOConfig, w)
    with pytest.raises(
        ConfigError, match=r"expected a list, got \{'a': 1\}; optim.betas is a list: Adam betas$"
    ):
        load_config(Cfg, None, ["optim.betas={a: 1}"])
    y = tmp_path / "c.yaml"
    y.write_text("? [a, b]\n: 1\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_config(FlowGRPOConfig, y)


def test_empty_lora_targets_matter_only_when_lora_trains():
    from imgalign.trainers.config import FlowGRPOConfig

    cfg = load_config(
        FlowGRPOConfig, None, ["model.lora_rank=0", "model.lora_targets=[]"]
    )  # a full fine-tune
    assert cfg.model.lora_targets == []
    with pytest.raises(ConfigError, match="model.lora_targets is empty"):
        load_config(FlowGRPOConfig, None, ["model.lora_rank=4", "model.lora_targets=[]"])


@dataclass
class Typed:
    flag: bool = field(False, help="a switch")
    level: Literal["off", "low", "high"] = field(
        "low", help="a choice one of whose words YAML reads as false"
    )
    key: int | str = field(0, help="a number or a name")
    tag: str | None = field("x", help="an optional name")
    specs: list[str] | None = field(None, help="optional reward specs", reward_specs=True)


def test_quoted_and_yaml_special_strings_coerce_by_the_field_type(tmp_path):
    """A quoted 'true' or '1' is a true bool; a Literal choice YAML reads as another type is the choice as typed;
    a union tries each type in turn; null is None for an optional field, even for its str member."""

    def load(*sets):
        return load_config(Typed, None, list(sets))

    for text, want in (('"true"', True), ("'yes'", True), ("'1'", True), ('"0"', False), ("'false'", False)):
        assert load(f"flag={text}").flag is want, text
    for text, want in (("1", True), ("0", False)):  # unquoted: YAML's integers, the same switch as quoted
        assert load(f"flag={text}").flag is want, text
    with pytest.raises(ConfigError, match="flag: expected true or false, got 'maybe'"):
        load("flag='maybe'")
    with pytest.raises(ConfigError, match="flag: expected true or false, got 2"):
        load("flag=2")
    p = tmp_path / "c.yaml"
    p.write_text("flag: '1'\nlevel: 'off'\nkey: '5'\n")
    cfg = load_config(Typed, p)
    assert cfg.flag is True and cfg.level == "off" and cfg.key == "5"  # quoted in YAML: a string
    assert load("level=off").level == "off" and load("level='high'").level == "high"
    assert load("key=5").key == 5 and load("key='5'").key == "5" and load("key=abc").key == "abc"
    assert load("tag=null").tag is None and load("tag='null'").tag == "null"
    assert load("key=null").key == "null"  # null is None only for a field that may be None
    assert load("flag='True'").flag is True and load("flag='No'").flag is False  # any case
    assert load("specs=clip:model=X,pretrained=openai,geneval").specs == [
        "clip:model=X,pretrained=openai",
        "geneval",
    ]
    assert load_config(Cfg, None, ["seed=null"]).seed is None


def test_set_values_keep_their_text_for_a_str_member_of_a_union():
    """As for a plain str field (test_set_values_keep_their_text_for_string_fields): YAML's reading of 1e-4, 010
    or 12:30 is not what the user typed for `str | None`."""
    for text in ("1e-4", "010", "12:30"):
        assert load_config(Typed, None, [f"tag={text}"]).tag == text
    assert load_config(Typed, None, ["key=7"]).key == 7  # an int member still takes YAML's number


@pytest.mark.parametrize(
    "bad, good, message",
    [
        (["model.lora_rank=-1"], ["model.lora_rank=0"], "model.lora_rank must be >= 0"),
        (["model.path="], ["model.path=shapes"], "model.path is empty"),
        (
            ["prompts.test_fraction=1.0"],
            ["prompts.test_fraction=0.0"],
            "prompts.test_fraction must be in [0, 1)",
        ),
        (["sampling.num_steps=1"], ["sampling.num_steps=2"], "sampling.num_steps must be at least 2"),
        (
            ["sampling.group_size=1", "sampling.samples_per_step=4"],
            ["sampling.group_size=2", "sampling.samples_per_step=4"],
            "sampling.group_size must be at least 2",
        ),
        (["sampling.batch_size=0"], ["sampling.batch_size=1"], "sampling.batch_size must be >= 1"),
        (["sampling.noise_level=0"], ["sampling.noise_level=0.01"], "sampling.noise_level must be > 0"),
        (["sampling.noise_block=0"], ["sampling.noise_block=1"], "sampling.noise_block must be >= 1"),
        (
            ["sampling.sde_window=10"],
            ["sampling.sde_window=9"],
            "sampling.sde_window must be in [0, num_steps - 1 = 9]",
        ),
        (
            ["sampling.antithetic=true", "sampling.group_size=3", "sampling.samples_per_step=6"],
            ["sampling.antithetic=true", "sampling.group_size=2", "sampling.samples_per_step=6"],
            "sampling.antithetic pairs the images of a group",
        ),
        (["rewards.marble.ema=1.0"], ["rewards.marble.ema=0.0"], "rewards.marble.ema must be in [0, 1)"),
        (
            ["rewards.marble.refresh_every=0"],
            ["rewards.marble.refresh_every=1"],
            "rewards.marble.refresh_every must be >= 1",
        ),
        (["rewards.names=[]"], ["rewards.names=[clip]"], "rewards.names is empty"),
        (
            ["rewards.names=[geneval, clip]", "rewards.weights=[1]"],
            ["rewards.names=[geneval, clip]", "rewards.weights=[1, 0]"],
            "rewards.weights has 1 entries for 2 rewards",
        ),
        (
            ["rewards.names=[geneval, clip]", "rewards.weights=[2, -1]"],
            ["rewards.names=[geneval, clip]", "rewards.weights=[2, 0]"],
            "rewards.weights must be non-negative",
        ),
        (
            ["objective.penalty_weight=0.5"],
            ["objective.penalty_weight=0.5", "objective.penalty=vnorm"],
            "objective.penalty_weight > 0 needs objective.penalty",
        ),
        (["train.max_steps=0"], ["train.max_steps=1"], "train.max_steps must be >= 1"),
        (["train.micro_batch_size=0"], ["train.micro_batch_size=1"], "train.micro_batch_size must be >= 1"),
        (["train.ema_decay=1.0"], ["train.ema_decay=0.0"], "train.ema_decay must be in [0, 1)"),
        (["eval.vnorm_images=-1"], ["eval.vnorm_images=0"], "eval.vnorm_images must be >= 0"),
        (
            ["eval.prompt_dependence_prompts=1"],
            ["eval.prompt_dependence_prompts=2"],
            "eval.prompt_dependence_prompts must be 0 (off) or >= 2",
        ),
        (
            ["eval.prompt_dependence_seeds=1"],
            ["eval.prompt_dependence_seeds=2"],
            "eval.prompt_dependence_seeds must be >= 2",
        ),
        (["log.keep_last=0"], ["log.keep_last=1"], "log.keep_last must be >= 1"),
        # values that were silently read as something else (none, never, every N) or failed after the model loaded
        (["model.resolution=-64"], ["model.resolution=0"], "model.resolution must be >= 0"),
        (
            ["model.max_sequence_length=-1"],
            ["model.max_sequence_length=0"],
            "model.max_sequence_length must be >= 0",
        ),
        (["train.warmup_steps=-5"], ["train.warmup_steps=0"], "train.warmup_steps must be >= 0"),
        (["train.time_budget_min=-3"], ["train.time_budget_min=0"], "train.time_budget_min must be >= 0"),
        (["eval.every=-2"], ["eval.every=-1"], "eval.every must be -1 (never), 0 (at the end) or N >= 1"),
        (["log.checkpoint_every=-2"], ["log.checkpoint_every=0"], "log.checkpoint_every must be >= 0"),
        (["log.sample_every=-1"], ["log.sample_every=0"], "log.sample_every must be >= 0"),
        # CPS: std = sigma' sin(a pi / 2) falls again above a = 1 and is 0 at a = 2
        (
            ["sampling.kernel=cps", "sampling.noise_level=1.01"],
            ["sampling.kernel=cps", "sampling.noise_level=1"],
            "with sampling.kernel=cps",
        ),
        (
            ["sampling.noise_level=inf"],
            ["sampling.noise_level=5"],
            "sampling.noise_level must be > 0 and finite",
        ),
        (
            ["sampling.guidance_scale=inf"],
            ["sampling.guidance_scale=7"],
            "sampling.guidance_scale must be finite",
        ),
        (
            ["objective.kl_beta=inf"],
            ["objective.kl_beta=1"],
            "objective.kl_beta must be >= 0 and finite (got inf)",
        ),
        (
            ["rewards.names=[geneval, clip]", "rewards.weights=[1, inf]"],
            ["rewards.names=[geneval, clip]", "rewards.weights=[1, 1e6]"],
            "rewards.weights must be non-negative and finite",
        ),
        # edges a `<` for `<=` (or a dropped half of a check) would move
        (
            ["sampling.samples_per_step=0"],
            ["sampling.samples_per_step=8"],
            "sampling.samples_per_step must be >= 1 (got 0)",
        ),
        (
            ["sampling.sde_window=-1"],
            ["sampling.sde_window=0"],
            "sampling.sde_window must be in [0, num_steps - 1",
        ),
        (  # num_steps=10: a window of 4 trained steps starts at step 10 - 1 - 4 = 5 at the latest
            ["sampling.sde_window=4", "sampling.sde_window_max_start=6"],
            ["sampling.sde_window=4", "sampling.sde_window_max_start=5"],
            "starts at step 5 at the latest",
        ),
        (["objective.clip_range=0"], ["objective.clip_range=1e-4"], "objective.clip_range must be > 0"),
        (["objective.adv_clip=-0.5"], ["objective.adv_clip=0"], "objective.adv_clip must be >= 0"),
        (
            ["objective.penalty=vnorm", "objective.penalty_weight=-1"],
            ["objective.penalty_weight=0"],
            "objective.penalty_weight must be >= 0 and finite (got -1",
        ),
        (  # a named penalty at weight 0 was never computed: no penalty, no reference, nothing logged
            ["objective.penalty=vnorm"],
            ["objective.penalty=vnorm", "objective.penalty_weight=1e-9"],
            "objective.penalty='vnorm' with objective.penalty_weight=0 adds nothing",
        ),
        (["train.lr=0"], ["train.lr=1e-8"], "train.lr must be > 0 and finite"),
        (["train.weight_decay=-1e-4"], ["train.weight_decay=0"], "train.weight_decay must be >= 0"),
        (
            ["train.updates_per_step=0"],
            ["train.updates_per_step=1"],
            "train.updates_per_step must be >= 1 (got 0)",
        ),
        (
            ["eval.suite=geneval"],
            ["eval.suite=reward", "eval.every=-1"],
            "eval.suite: unknown suite 'geneval'",
        ),
        (["eval.prompts_per_task=0"], ["eval.prompts_per_task=1"], "eval.prompts_per_task must be >= 1"),
        (["eval.num_steps=0"], ["eval.num_steps=1"], "eval.num_steps must be >= 1"),
        # -3 meant the policy's scale (as -1), silently; inf gave the final evaluation infinite CFG
        (
            ["eval.guidance_scale=-0.5"],
            ["eval.guidance_scale=0"],
            "eval.guidance_scale must be -1 (the policy's sampling.guidance_scale) or a finite scale >= 0",
        ),
        (["eval.guidance_scale=inf"], ["eval.guidance_scale=-1"], "eval.guidance_scale must be -1"),
        # the finite halves of `0 <= x < inf` checks and the third setting of a shared check (mutation round 11b)
        (
            ["objective.adv_clip=inf"],
            ["objective.adv_clip=1e6"],
            "objective.adv_clip must be >= 0 and finite",
        ),
        (
            ["objective.anchor_beta=-0.1"],
            ["objective.anchor_beta=0.1", "sampling.sde_window=4"],
            "objective.anchor_beta must be >= 0 and finite (got -0.1)",
        ),
        (
            ["train.weight_decay=inf"],
            ["train.weight_decay=1e6"],
            "train.weight_decay must be >= 0 and finite",
        ),
    ],
)
def test_each_bound_refuses_its_first_bad_value_and_accepts_its_edge(bad, good, message):
    """Every range check of the training config, at its boundary: the first value out of range is a config error
    naming the setting (before any model loads), the last value in range loads."""
    from imgalign.trainers.config import FlowGRPOConfig

    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(FlowGRPOConfig, None, bad)
    load_config(FlowGRPOConfig, None, good)


@pytest.mark.parametrize(
    "bad, message",
    [
        (
            ["eval.suite=reward", "prompts.source=p.txt", "prompts.test_fraction=0"],
            "prompts.test_fraction=0 holds out none",
        ),
        (
            ["sampling.rollout=tree", "objective.step_weight=velocity"],
            "objective.step_weight=velocity weighs the SDE steps",
        ),
        (
            ["sampling.rollout=tree", "objective.anchor_beta=0.1"],
            "objective.anchor_beta anchors the untrained (ODE) steps",
        ),
        (["model.lora_rank=0", "model.dtype=float16"], "Set train.mixed_precision=fp16"),
        (["model.lora_rank=0", "model.dtype=bfloat16"], "Set train.mixed_precision=bf16"),
        (["sampling.rollout=tree", "sampling.antithetic=true"], "needs sampling.rollout=flat"),
        (["sampling.rollout=tree", "rewards.balancer=marble"], "sampling.rollout=tree assigns its own"),
        (["sampling.rollout=tree", "rewards.diagnose_cosines=true"], "sampling.rollout=tree assigns its own"),
        (["sampling.rollout=tree", "objective.name=nft"], "use sampling.rollout=flat with it"),
        (["rewards.balancer=no_such_balancer"], "rewards.balancer: "),
        (
            ["sampling.rollout=no_such_rollout"],
            "sampling.rollout: unknown rollout strategy 'no_such_rollout'; valid rollout strategies: flat, tree",
        ),
        (["objective.penalty=no_such_penalty"], "valid velocity penalties: vnorm, vnorm_squared"),
        # each half of the checks above on its own: an evaluation at the end only (eval.every=0), nft on flat
        # rollouts, a flat rollout without an SDE window, nft with one
        (["eval.suite=reward"], "eval.suite=reward scores the held-out test prompts of a prompt file"),
        (["objective.name=nft", "objective.step_weight=velocity"], "objective.step_weight=velocity weighs"),
        (["objective.anchor_beta=0.1"], "objective.anchor_beta anchors the untrained (ODE) steps"),
        (
            ["objective.name=nft", "sampling.sde_window=4", "objective.anchor_beta=0.1"],
            "objective.anchor_beta anchors the untrained (ODE) steps",
        ),
        (
            ["sampling.rollout=tree", "sampling.sde_window=4"],
            "sampling.sde_window must be 0 with sampling.rollout=tree",
        ),
        (["prompts.tasks=[]"], "prompts.tasks is empty"),
    ],
)
def test_each_cross_setting_check_refuses_its_combination(bad, message):
    """The checks that combine settings, each on the combination it refuses (eval.every=0, the default, evaluates at
    the end; a tree rollout never has an SDE window), with the message naming what to set."""
    from imgalign.trainers.config import FlowGRPOConfig

    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(FlowGRPOConfig, None, bad)


def test_cross_setting_checks_accept_their_edges():
    """What the cross-setting checks let through: a window covering every trainable step has no start to check;
    a half-precision model trains when LoRA or autocast gives its trained weights the right inputs."""
    from imgalign.trainers.config import FlowGRPOConfig

    for sets in (
        ["sampling.sde_window=9", "sampling.sde_window_max_start=3"],  # max_start is unused then
        ["model.lora_rank=4", "model.dtype=bfloat16"],
        ["model.dtype=bfloat16", "train.mixed_precision=bf16"],
        ["model.dtype=float16", "train.mixed_precision=fp16"],
        ["eval.prompt_dependence_prompts=0", "eval.prompt_dependence_seeds=1"],  # the seeds are unused then
    ):
        load_config(FlowGRPOConfig, None, sets)


def test_micro_batches_round_up_when_the_update_does_not_fill_the_last_one():
    """3 samples (flat) or 3 parent rows (tree) per update in micro-batches of 2 take 2 forwards, not 1: the count
    DeepSpeed's gradient accumulation is set from must include the partial last micro-batch."""
    from imgalign.trainers.config import FlowGRPOConfig, check_batch_layout

    flat = ["sampling.samples_per_step=6", "sampling.group_size=2", "train.micro_batch_size=2"]
    flat = check_batch_layout(load_config(FlowGRPOConfig, None, flat + ["sampling.sde_window=4"]), 2)
    assert flat["samples_per_update_per_process"] == 3 and flat["micro_batches_per_update"] == 2 * 4
    tree = ["sampling.rollout=tree", "sampling.tree.branch_steps=[0]", "sampling.tree.branch_factors=[2]"]
    tree += ["sampling.samples_per_step=6", "sampling.group_size=2", "train.micro_batch_size=2"]
    tree = check_batch_layout(load_config(FlowGRPOConfig, None, tree), 1)
    assert tree["tree_parent_rows_per_process"] == 3 and tree["micro_batches_per_update"] == 2


def test_each_type_refuses_a_value_of_another_kind_naming_the_key(tmp_path):
    """A bool is not an integer or a number (YAML reads an unquoted true as a bool), a word is not a number, a
    list or mapping is not a string, a scalar is not a section; each item of a list or mapping is coerced to its
    type. Each is a config error naming the key, not a value that slips through or a raw Python error."""
    for sets, message in [
        (["steps=true"], "steps: expected an integer, got True"),
        (["optim.lr=true"], "optim.lr: expected a number, got True"),
        (["optim.lr=abc"], "optim.lr: expected a number, got 'abc'"),
        (["seed=abc"], "seed: expected an integer, got 'abc'"),  # int | None: None is not a fallback
        (["optim=3"], "optim: expected a mapping of Optim fields, got 3"),
        (["optim.betas=[0.9, x]"], r"optim.betas\[1\]: expected a number, got 'x'"),
        (["weights={clip: x}"], "weights.clip: expected a number, got 'x'"),
        (["name=a", "name.x=1"], "override 'name.x=1': 'name' is not a section"),
        (["=3"], "override '=3' has an empty key"),
    ]:
        with pytest.raises(ConfigError, match=f"^{message}"):
            load_config(Cfg, None, sets)
    p = tmp_path / "c.yaml"
    p.write_text("name: [a, b]\n")
    # log.trackers: [tensorboard] read as a list said only that; the hint names the comma list it takes
    with pytest.raises(
        ConfigError, match=r"^name: expected a string, got \['a', 'b'\] \(.* one comma list: a,b\)"
    ):
        load_config(Cfg, p)
    cfg = load_config(Cfg, None, ["weights={clip: 1}", "optim.betas=[1, 0]", " steps = 5"])
    assert cfg.weights == {"clip": 1.0} and type(cfg.weights["clip"]) is float and cfg.steps == 5
    assert cfg.optim.betas == (1.0, 0.0) and all(type(b) is float for b in cfg.optim.betas)


def test_a_comma_separated_string_for_a_list_of_numbers_reads_each_item(tmp_path):
    """`"1, 2"` in a YAML file (or --set) for a list of integers: each item as YAML reads it; empty items between
    commas are dropped, for lists of strings and of reward specs too."""

    @dataclass
    class Steps:
        at: list[int] = field(default_factory=list, help="steps")
        names: list[str] = field(default_factory=list, help="names")
        specs: list[str] = field(default_factory=list, help="reward specs", reward_specs=True)

    p = tmp_path / "c.yaml"
    p.write_text('at: "0, 3,"\n')
    assert load_config(Steps, p).at == [0, 3]
    assert load_config(Steps, None, ["at=0,3"]).at == [0, 3]
    assert load_config(Steps, None, ["names=a,,b,"]).names == ["a", "b"]
    assert load_config(Steps, None, ["specs=clip,,geneval:mode=strict,"]).specs == [
        "clip",
        "geneval:mode=strict",
    ]
    # YAML reads `[geneval:, clip]` as a mapping {geneval: None} and a string: the spec as written
    assert load_config(Steps, None, ["specs=[geneval:, clip]"]).specs == ["geneval:", "clip"]
    p.write_text("specs: [clip, 2]\n")  # a non-string item is not joined to the one before it
    assert load_config(Steps, p).specs == ["clip", "2"]


def test_config_files_that_are_empty_a_list_or_not_yaml(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("# nothing set\n")
    assert load_config(Cfg, p) == Cfg()
    p.write_text("optim:\n")  # a section left empty: an override fills it
    assert load_config(Cfg, p, ["optim.lr=0.5"]).optim.lr == 0.5
    p.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must hold a mapping at the top level"):
        load_config(Cfg, p)
    p.write_text("name: [a\n")
    with pytest.raises(ConfigError, match=r"c.yaml' is not valid YAML"):
        load_config(Cfg, p)
    # a tab indent: what to do, and the place by line (not PyYAML's 'in "<unicode string>"')
    p.write_text("optim:\n\tlr: 0.1\n")
    with pytest.raises(
        ConfigError, match=r"  line 2, column 1:\n(.|\n)*indent with spaces: YAML does not allow tabs$"
    ):
        load_config(Cfg, p)


def test_an_empty_or_null_value_is_refused_naming_the_key_and_an_empty_section_is_its_defaults(tmp_path):
    """YAML reads `output_dir:` (nothing after the colon), ~ and null as None: a str field took it as the text
    "None" (a run folder named None, a model 'None'), a list item too. Refused naming the key; a section whose keys
    are all commented out is its defaults (as an empty file is); an optional field still takes None."""
    p = tmp_path / "c.yaml"
    for text, key in (
        ("name:\n", "name"),
        ("name: ~\n", "name"),
        ("steps: null\n", "steps"),
        ("rewards: [geneval, ~]\n", r"rewards\[1\]"),
        ("optim:\n  lr:\n", "optim.lr"),
    ):
        p.write_text(text)
        with pytest.raises(ConfigError, match=f"^{key} has no value .*: give one, or remove "):
            load_config(Cfg, p)
    p.write_text("optim:\n  # lr: 0.1\nsteps: 3\n")
    assert load_config(Cfg, p) == Cfg(steps=3)
    p.write_text("seed: ~\n")
    assert load_config(Cfg, p).seed is None
    with pytest.raises(ConfigError, match="^steps has no value"):
        load_config(Cfg, None, ["steps=null"])
    assert load_config(Cfg, None, ["name=null"]).name == "null"  # --set gives a str field the text typed


def test_a_config_file_gives_a_str_field_the_text_written_and_refuses_an_octal_number(tmp_path):
    """As with --set (test_set_values_keep_their_text_for_string_fields): an unquoted 12:30, 1.10, 0123 or yes in
    a YAML file is the text written for a str field (YAML 1.1 made them 750, '1.1', '83', 'True': a run folder of
    another name, silently), also in a list of strings; other fields still take YAML's value. A leading 0 that
    makes YAML read an octal number (max_steps: 010 was 8) is refused naming the key and the number meant."""
    p = tmp_path / "c.yaml"
    for text in ("12:30", "1.10", "0123", "yes", "1e-4", "0x1F"):
        p.write_text(f"name: {text}\nrewards: [{text}]\n")
        cfg = load_config(Cfg, p)
        assert cfg.name == text and cfg.rewards == [text], text
    p.write_text("steps: 1_000\nmode: b\noptim: {lr: 1e-3, betas: [0.5, 1]}\nweights: {clip: 2}\n")
    cfg = load_config(Cfg, p)
    assert cfg.steps == 1000 and cfg.optim.lr == 1e-3 and cfg.optim.betas == (0.5, 1.0)
    assert cfg.weights == {"clip": 2.0} and type(cfg.weights["clip"]) is float
    p.write_text("base: &b {lr: 0.5}\noptim: {<<: *b, betas: [0.1, 0.2]}\n")  # merge keys still merge
    with pytest.raises(ConfigError, match="unknown config key 'base'"):
        load_config(Cfg, p)
    p.write_text("optim: {<<: {lr: 0.5}, betas: [0.1, 0.2]}\n")
    assert load_config(Cfg, p).optim.lr == 0.5
    for text, number, meant in (("010", 8, 10), ("-0_17", -15, -17)):
        p.write_text(f"steps: {text}\n")
        message = (
            f"steps: YAML reads {text} as the octal number {number}; write {meant} without the leading 0"
        )
        with pytest.raises(ConfigError, match=f"^{message}$"):
            load_config(Cfg, p)
    with pytest.raises(ConfigError, match="^optim.lr: YAML reads 010 as the octal"):
        load_config(Cfg, None, ["optim.lr=010"])
    p.write_text("optim: {betas: {a: 1}}\n")  # an error shows the values as YAML read them
    with pytest.raises(ConfigError, match=r"^optim.betas: expected a list, got \{'a': 1\}"):
        load_config(Cfg, p)
    p.write_text("steps: 07\noptim: {lr: 00}\n")  # the same number either way
    assert load_config(Cfg, p).steps == 7


def test_an_integer_in_exponent_form_reads_as_in_set_and_a_quoted_one_says_to_unquote(tmp_path):
    """YAML 1.1 reads 1e3 and 1.0e3 (no sign in the exponent) as text: steps: 1e3 was refused in a file while
    --set steps=1e3 gave 1000. A quoted integer is text and is refused, saying so (it read "got '5'")."""
    p = tmp_path / "c.yaml"
    for text in ("1e3", "1.0e3", "1E+3"):
        p.write_text(f"steps: {text}\n")
        assert load_config(Cfg, p).steps == 1000, text
    assert load_config(Cfg, None, ["steps=1e3"]).steps == 1000
    p.write_text("steps: 1.5e0\n")
    with pytest.raises(ConfigError, match=r"^steps: expected an integer, got 1.5$"):
        load_config(Cfg, p)
    p.write_text("steps: '5'\n")
    with pytest.raises(ConfigError, match=r"got '5' \(a quoted number is text in YAML: remove the quotes\)$"):
        load_config(Cfg, p)


def test_a_mapping_given_to_set_for_a_section_sets_only_its_keys(tmp_path):
    """--set optim={lr: 0.2} replaced the file's whole optim section: its other keys fell back to the defaults
    silently. A mapping now sets those keys, as optim.lr=0.2 would; a later --set of a key still wins; --set
    optim=null is refused (only a section in a file left empty is its defaults)."""
    p = tmp_path / "c.yaml"
    p.write_text("optim:\n  lr: 0.1\n  betas: [0.5, 0.5]\nweights: {a: 1}\n")
    cfg = load_config(Cfg, p, ["optim={lr: 0.2}", "weights={b: 2}"])
    assert cfg.optim == Optim(lr=0.2, betas=(0.5, 0.5)) and cfg.weights == {"a": 1.0, "b": 2.0}
    assert load_config(Cfg, p, ["optim={lr: 0.2}", "optim.lr=0.3"]).optim.lr == 0.3
    assert load_config(Cfg, None, ["optim={lr: 0.2}"]).optim == Optim(lr=0.2)
    with pytest.raises(ConfigError, match="^optim has no value"):
        load_config(Cfg, p, ["optim=null"])
    with pytest.raises(ConfigError, match="unknown config key 'optim.lrr'"):
        load_config(Cfg, p, ["optim={lrr: 0.2}"])
    # a str inside a mapping or list given to --set keeps its text, as in a file (12:30 was 750)
    assert load_config(Cfg, None, ["optim={lr: 0.2}", "rewards=[12:30, 1.10]"]).rewards == ["12:30", "1.10"]
    with pytest.raises(ConfigError, match=r"^override 'optim=\{lr: 1, lr: 2\}': key 'lr' appears twice"):
        load_config(Cfg, None, ["optim={lr: 1, lr: 2}"])


def test_a_key_given_twice_in_a_config_file_is_refused_naming_both_lines(tmp_path):
    """YAML keeps the last of two equal keys silently: a second `optim:` section appended to a file dropped every
    setting of the first. Refused naming the key and both lines; a merge key (<<) may still override its keys."""
    p = tmp_path / "c.yaml"
    p.write_text("steps: 5\noptim:\n  lr: 0.1\n  betas: [0.5, 0.5]\nname: x\noptim:\n  lr: 0.2\n")
    message = (
        "c.yaml': key 'optim' appears twice in one mapping (lines 2 and 6); YAML would keep only the last"
    )
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(Cfg, p)
    p.write_text("optim:\n  lr: 0.1\n  lr: 0.2\n")
    with pytest.raises(ConfigError, match=r"key 'lr' appears twice in one mapping \(lines 2 and 3\)"):
        load_config(Cfg, p)
    p.write_text("optim: &o {lr: 0.1, betas: [0.5, 0.5]}\nweights: {<<: {clip: 1}, clip: 2}\n")
    cfg = load_config(Cfg, p)
    assert cfg.optim.lr == 0.1 and cfg.weights == {"clip": 2.0}


def test_nested_checks_run_innermost_first():
    """A section's own check runs before its parent's, so the first error names the setting to change, not a
    combination the parent checks assuming a valid section."""

    @dataclass
    class Inner:
        n: int = field(1, help="n")

        def validate(self) -> None:
            if self.n < 1:
                raise ConfigError("inner.n must be >= 1")

    @dataclass
    class Outer:
        inner: Inner = field(default_factory=Inner, help="inner")
        m: int = field(1, help="m")

        def validate(self) -> None:
            if self.m % self.inner.n:
                raise ConfigError("m must be a multiple of inner.n")

    with pytest.raises(ConfigError, match="inner.n must be >= 1"):
        load_config(Outer, None, ["inner.n=0", "m=3"])
    with pytest.raises(ConfigError, match="m must be a multiple"):
        load_config(Outer, None, ["inner.n=2", "m=3"])


def test_describe_and_to_dict_show_nested_keys_factory_defaults_and_paths():
    from imgalign.trainers.config import FlowGRPOConfig

    rows = describe(Cfg)
    assert ("rewards", "['geneval']", "rewards") in rows and ("weights", "{}", "reward weights") in rows
    keys = [k for k, _, _ in describe(FlowGRPOConfig)]
    assert "sampling.tree.branch_steps" in keys and "rewards.marble.ema" in keys  # two levels down

    @dataclass
    class WithPath:
        out: Path = field(Path("runs") / "a", help="folder")

    assert to_dict(WithPath()) == {"out": str(Path("runs") / "a")}


def test_each_registry_lists_its_builtins_in_a_fresh_process():
    """A registry loads the modules that register its built-ins itself: in a process that imported nothing else,
    names() already holds them (the velocity penalties are registered in objectives.py, not vnorm.py)."""
    import subprocess
    import sys

    code = (
        "from imgalign.trainers.registry import BALANCERS, OBJECTIVES, PENALTIES, ROLLOUTS\n"
        "for r in (PENALTIES, OBJECTIVES, ROLLOUTS, BALANCERS): print(r.kind, r.names())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [
        "velocity penalty ['vnorm', 'vnorm_squared']",
        "objective ['grpo', 'nft']",
        "rollout strategy ['flat', 'tree']",
        "reward balancer ['gdpo', 'group_norm_weighted', 'marble', 'weighted_sum']",
    ]


def test_a_registry_lists_names_sorted_and_its_errors_name_what_to_give(tmp_path, monkeypatch):
    """Registries (objectives, rollouts, balancers, penalties): names() sorted; an unknown name lists the valid ones;
    a `module:attr` path whose attribute is missing is a ValueError like an unknown name; a built-in module absent
    from the checkout is skipped, but one present whose own imports fail is an error, not a silently short list."""
    from imgalign.trainers.registry import Registry

    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "reg_plugin_ok.py").write_text("thing = 3\n")
    reg = Registry("widget", ("reg_plugin_absent_xyz",))
    for name in ("zeta", "alpha", "mid"):
        assert reg.register(name)(name.upper()) == name.upper()  # the decorator hands the object back
    assert reg.names() == ["alpha", "mid", "zeta"] and reg.get("mid") == "MID"
    assert reg.get("reg_plugin_ok:thing") == 3
    with pytest.raises(ValueError, match=r"unknown widget 'nope'; valid widgets: alpha, mid, zeta \(or a"):
        reg.check("nope")
    with pytest.raises(ValueError, match=r"cannot import widget 'reg_plugin_ok:missing'"):
        reg.get("reg_plugin_ok:missing")
    with pytest.raises(ValueError, match=r"cannot import widget 'reg_plugin_ok:thing:x'"):
        reg.get("reg_plugin_ok:thing:x")  # the attribute is all after the first colon
    with pytest.raises(ValueError, match=r"cannot import widget 'reg_plugin_absent_xyz:x'"):
        reg.get("reg_plugin_absent_xyz:x")
    (tmp_path / "reg_plugin_broken.py").write_text("import reg_plugin_missing_dependency_xyz\n")
    with pytest.raises(ModuleNotFoundError, match="reg_plugin_missing_dependency_xyz"):
        Registry("widget", ("reg_plugin_absent_xyz", "reg_plugin_broken")).names()


def test_a_plugin_rollout_or_penalty_that_cannot_take_its_arguments_is_refused_when_the_config_is_checked(
    tmp_path, monkeypatch
):
    """A rollout strategy / velocity penalty given as package.module:attr with the wrong signature (or not callable)
    is refused by name with the call it must take when the config is checked (was: a TypeError traceback at the
    first training step, after the model loaded)."""
    from imgalign.trainers.registry import PENALTIES, ROLLOUTS

    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "cfgtest_calls.py").write_text(
        "def one_arg(v):\n    return v\n\n\ndef two_args(ctx, prompts):\n    return None\n\n\nLIMIT = 3\n"
        "def penalty(v_theta, v_ref):\n    return v_theta\n"
    )
    with pytest.raises(
        ValueError, match=r"velocity penalty 'cfgtest_calls:one_arg' cannot be called as penalty"
    ):
        PENALTIES.check("cfgtest_calls:one_arg")
    with pytest.raises(
        ValueError, match=r"'cfgtest_calls:two_args' cannot be called as strategy\(ctx, prompts, "
    ):
        ROLLOUTS.check("cfgtest_calls:two_args")
    with pytest.raises(
        ValueError, match=r"'cfgtest_calls:LIMIT' cannot be called .*: it is of type int, not callable"
    ):
        PENALTIES.check("cfgtest_calls:LIMIT")
    assert PENALTIES.get("cfgtest_calls:penalty").__name__ == "penalty"


def test_train_no_progress_turns_the_bar_off_as_in_the_other_commands(capsys):
    """Every other command takes --no-progress; `imgalign train --no-progress` was an unrecognized argument. It sets
    log.progress=false (what --print-config shows and the trainer reads)."""
    import yaml

    from imgalign.cli import main

    assert main(["train", "--no-progress", "--print-config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["log"]["progress"] is False
    assert main(["train", "--print-config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["log"]["progress"] is True


def test_train_describe_shows_a_configs_values_beside_the_defaults(tmp_path, capsys):
    """train CONFIG --describe (or with --set) listed the defaults only, ignoring both silently; each key now shows
    the value they give, with its default where the two differ. Without them, defaults only."""
    from imgalign.cli import main

    assert main(["train", "--describe"]) == 0
    plain = capsys.readouterr().out
    assert "train.lr = 0.0001\n" in plain and "(default" not in plain
    cfg = tmp_path / "c.yaml"
    cfg.write_text("objective:\n  name: nft\n")
    assert main(["train", str(cfg), "--set", "train.lr=0.002", "--describe"]) == 0
    out = capsys.readouterr().out
    assert "objective.name = 'nft'  (default 'grpo')\n" in out
    assert "train.lr = 0.002  (default 0.0001)\n" in out
    assert "train.ema_decay = 0.0\n" in out  # a key both leave at its default: no note
    assert len(out.splitlines()) == len(plain.splitlines())


def test_top_level_split_ignores_a_stray_closing_bracket_and_splits_everything_after_an_unclosed_one():
    """A `]` with no `[` before it closes nothing (the next `[...]` still keeps its commas), and an unclosed bracket
    makes every comma split, as the docstring says (mutation round 11b)."""
    from imgalign.config import split_top_level

    assert split_top_level("x=a],y=[1,2]") == ["x=a]", "y=[1,2]"]
    assert split_top_level("a=[x,b") == ["a=[x", "b"]


def test_a_reward_piece_whose_key_has_a_space_is_its_own_spec_not_an_option():
    """Only a piece that looks like `key=value` (no `:` and no space before the `=`) joins the spec before it as an
    option (mutation round 11b)."""
    from imgalign.trainers.config import FlowGRPOConfig

    names = load_config(FlowGRPOConfig, None, ["rewards.names=clip,my reward=1"]).rewards.names
    assert names == ["clip", "my reward=1"]


def test_a_null_list_item_says_to_remove_the_item_and_a_comma_list_string_drops_empty_items(tmp_path):
    """A null item of a list is removed, not kept at a default; a YAML string for a list of strings drops the empty
    items a doubled or trailing comma leaves (mutation round 11b)."""
    from imgalign.trainers.config import FlowGRPOConfig

    p = tmp_path / "c.yaml"
    p.write_text("rewards: [geneval, ~]\n")
    with pytest.raises(ConfigError, match=r"^rewards\[1\] has no value .*: give one, or remove the item$"):
        load_config(Cfg, p)
    p.write_text('prompts:\n  tasks: "counting,, position,"\n')
    assert load_config(FlowGRPOConfig, p).prompts.tasks == ["counting", "position"]


def test_a_mapping_given_to_set_merges_a_nested_section_key_by_key(tmp_path):
    """`--set rewards={marble: {ema: 0.5}}` sets only rewards.marble.ema: the file's other keys of the nested
    section stay (mutation round 11b)."""
    from imgalign.trainers.config import FlowGRPOConfig

    p = tmp_path / "c.yaml"
    p.write_text("rewards:\n  marble:\n    refresh_every: 3\n")
    marble = load_config(FlowGRPOConfig, p, ["rewards={marble: {ema: 0.5}}"]).rewards.marble
    assert (marble.ema, marble.refresh_every) == (0.5, 3)

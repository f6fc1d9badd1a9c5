"""Bad-input round 30d: small faults in the config, reward-spec, score and model-folder messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgalign.config import ConfigError, load_config
from imgalign.trainers.config import FlowGRPOConfig


def test_a_reward_option_with_no_name_is_refused_by_what_was_written():
    """`geneval:=1` said "unknown option(s) ; its options: ...", the empty option name invisible in the message."""
    from imgalign.rewards.base import check_reward_options

    with pytest.raises(ValueError) as info:
        check_reward_options("geneval:=1")
    assert str(info.value) == "reward option '=1' in 'geneval:=1' has no name before '='; write key=value"


def test_a_negative_prompt_dependence_seed_count_is_refused_with_the_measurement_off():
    """eval.prompt_dependence_seeds=-5 passed while prompt_dependence_prompts=0, to fail only once the measurement
    was turned on; now a negative count is refused whatever the other key, and the value is named."""
    over = ["eval.prompt_dependence_prompts=0", "eval.prompt_dependence_seeds=-5"]
    with pytest.raises(ConfigError) as info:
        load_config(FlowGRPOConfig, None, over)
    assert str(info.value) == (
        "eval.prompt_dependence_seeds must be >= 2 (distances between seeds are compared), got -5"
    )
    # 0 and 1 mean nothing while the measurement is off: still taken
    cfg = load_config(
        FlowGRPOConfig, None, ["eval.prompt_dependence_prompts=0", "eval.prompt_dependence_seeds=0"]
    )
    assert cfg.eval.prompt_dependence_seeds == 0


@pytest.mark.parametrize(
    "source, written",
    [("set", "1e-400"), ("file", "1e-400"), ("file", "1.0e-400"), ("set", "-2.5E-999")],
)
def test_a_number_closer_to_0_than_the_smallest_float_is_named_not_reported_as_zero(
    tmp_path, source, written
):
    """train.lr=1e-400 underflows to 0.0 and was refused as "train.lr must be > 0 and finite (got 0.0)", for a
    value the user wrote above 0 (and a YAML file's 1e-400, text to YAML 1.1, the same)."""
    if source == "set":
        args = (None, [f"train.lr={written}"])
    else:
        path = tmp_path / "c.yaml"
        path.write_text(f"train:\n  lr: {written}\n")
        args = (path, [])
    with pytest.raises(ConfigError) as info:
        load_config(FlowGRPOConfig, *args)
    assert str(info.value) == (
        f"train.lr: {written} is closer to 0 than the smallest float (about 5e-324) and would be read as 0; give "
        "one further from 0, or 0"
    )


def test_a_zero_written_as_zero_is_not_called_an_underflow():
    """0e5 and 0.0 are zeros as written: their own message (lr must be > 0), not the underflow one."""
    for written in ("0e5", "0.0"):
        with pytest.raises(ConfigError, match=r"^train.lr must be > 0 and finite \(got 0.0\)$"):
            load_config(FlowGRPOConfig, None, [f"train.lr={written}"])
    cfg = load_config(FlowGRPOConfig, None, ["train.weight_decay=0e5"])
    assert cfg.train.weight_decay == 0.0


@pytest.mark.parametrize(
    "text, named",
    [("null: 1\n", "null"), ("~: 1\n", "~"), ("yes: 1\n", "yes"), ("train:\n  null: 1\n", "train.null")],
)
def test_a_config_files_key_yaml_reads_as_other_than_text_is_named_as_written(tmp_path, text, named):
    """A `null:` key was named 'None' in the unknown-key message (`yes:` 'True'): the key the user wrote."""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(
        ConfigError, match=rf"^config file '.*c\.yaml': unknown config key '{named}'; valid keys here: "
    ):
        load_config(FlowGRPOConfig, path)


def _checkpoint(root: Path) -> Path:
    (root / "run" / "checkpoints" / "step-000001").mkdir(parents=True)  # an older one, incomplete
    ckpt = root / "run" / "checkpoints" / "step-000002"
    (ckpt / "trainer_state").mkdir(parents=True)
    (ckpt / "trainer_state" / "state.json").write_text('{"step": 2}')
    (ckpt / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusion3Pipeline"}))
    return ckpt


def test_score_given_a_checkpoint_says_how_to_score_the_images_it_makes(tmp_path, capsys):
    """`imgalign score CKPT` said only "no image files found in CKPT"; it now says CKPT is a model and names the
    commands that sample and judge it (a run, or its checkpoints/ folder, names its latest checkpoint; its
    trainer_state/ the checkpoint holding it)."""
    from imgalign.cli import main

    ckpt = _checkpoint(tmp_path)
    out = tmp_path / "s.jsonl"
    for given in (ckpt, ckpt.parent, ckpt.parent.parent, ckpt / "trainer_state"):
        assert main(["score", str(given), "--reward", "geneval", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert (
            f"no image files found in {given}: '{ckpt}' is a model (a checkpoint or pipeline folder), not images; "
            f"score images it makes with `imgalign eval --model {ckpt} --out DIR`"
        ) in err
        assert f"`imgalign grid --model A={ckpt} --prompts FILE --reward NAME`" in err
        assert not out.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["score", str(empty), "--reward", "geneval", "--out", str(out)]) == 2
    assert f"no image files found in {empty}\n" in capsys.readouterr().err


def test_a_model_index_without_its_class_name_is_named_damaged(tmp_path, capsys):
    """A model_index.json with no `_class_name` passed the folder checks and failed in diffusers' KeyError, shown
    as "imgalign eval: error: _class_name" (after eval_args.json was written into --out)."""
    from imgalign.cli import main

    ckpt = _checkpoint(tmp_path)
    index = ckpt / "model_index.json"
    index.write_text("{}")
    out = tmp_path / "ev"
    assert main(["eval", "--model", str(ckpt), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{index} is damaged: it has no '_class_name' entry (the pipeline class" in err
    assert not out.exists()


@pytest.mark.parametrize(
    "spec, option, kind, written",
    [
        ("clip:weight=1e-400", "weight", "a number (default 2.5)", "1e-400"),
        ("clip:batch_size=-1E-999", "batch_size", "a whole number (default 64)", "-1E-999"),
        ("clip:weight=1e400", "weight", "a number (default 2.5)", "1e400"),
    ],
)
def test_a_reward_option_number_a_float_cannot_hold_is_refused_as_written(spec, option, kind, written):
    """clip:weight=1e-400 was read as 0.0 and refused when built as "weight must be > 0, got 0.0" (batch_size=1e-400
    passed as 0); a number out of a float's range is now left as written and refused by name, saying why."""
    from imgalign.rewards.base import check_reward_options, parse_reward_spec

    assert parse_reward_spec(spec)[1] == {option: written}
    with pytest.raises(ValueError) as info:
        check_reward_options(spec)
    assert str(info.value) == (
        f"reward 'clip': option {option} must be {kind}, got {written!r} (out of a float's range: about 5e-324 to "
        "1.8e308 from 0)"
    )
    assert parse_reward_spec("clip:weight=0e5,batch_size=2e1")[1] == {"weight": 0.0, "batch_size": 20.0}

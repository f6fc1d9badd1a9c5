"""Round 32 (helper g): a training config built or changed in Python (a notebook) and given to the trainer has its
values read as a config file's before anything loads: a wrong type is refused naming its key, and a value of another
type that means the same (a Path, a tuple, 4.0, a reward spec string, a dict section) is converted."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.config import ConfigError, check_built
from imgalign.trainers.config import FlowGRPOConfig
from imgalign.trainers.trainer import FlowGRPOTrainer


def _config(tmp_path: Path) -> FlowGRPOConfig:
    cfg = FlowGRPOConfig()
    cfg.model.path = str(tmp_path / "no_model")
    cfg.log.output_dir = str(tmp_path / "run")
    cfg.log.trackers = "none"
    cfg.eval.every = -1
    return cfg


@pytest.mark.parametrize(
    "section, key, value, text",
    [
        ("train", "max_steps", "2", r"train\.max_steps: expected an integer, got '2'"),
        ("train", "seed", "0", r"train\.seed: expected an integer, got '0'"),
        ("train", "lr", "fast", r"train\.lr: expected a number, got 'fast'"),
        ("sampling", "batch_size", 2.5, r"sampling\.batch_size: expected an integer, got 2\.5"),
    ],
)
def test_a_wrong_type_set_in_python_is_refused_naming_its_key_before_anything_loads(
    tmp_path, section, key, value, text
) -> None:
    """They failed in Python's words after the model loaded ("'str' object cannot be interpreted as an integer" at the
    first step, "unsupported operand type(s) for &: 'str' and 'int'"); here the model does not even exist."""
    cfg = _config(tmp_path)
    setattr(getattr(cfg, section), key, value)
    with pytest.raises(ConfigError, match=rf"^{text}"):
        FlowGRPOTrainer(cfg).setup()
    assert not (tmp_path / "run").exists()


def test_values_of_another_type_that_mean_the_same_are_converted_in_place(tmp_path) -> None:
    """rewards.names "clip" was the rewards 'c', 'l', 'i', 'p' ("unknown reward 'i'"); model.path as a Path failed
    with "'PosixPath' object has no attribute 'partition'"; train.mixed_precision False was "check the accelerate
    launch flags"; a section given as a dict failed with "'dict' object has no attribute 'suite'"."""
    cfg = _config(tmp_path)
    train = cfg.train
    cfg.model.path = tmp_path / "model"
    cfg.rewards.names = "clip, geneval:mode=strict"
    cfg.prompts.tasks = ("colors", "counting")
    cfg.sampling.batch_size = 4.0
    cfg.train.lr = "1e-4"
    cfg.train.mixed_precision = False
    cfg.eval = {"every": -1}
    check_built(cfg)
    assert cfg.model.path == str(tmp_path / "model")
    assert cfg.rewards.names == ["clip", "geneval:mode=strict"]
    assert cfg.prompts.tasks == ["colors", "counting"]
    assert cfg.sampling.batch_size == 4 and type(cfg.sampling.batch_size) is int
    assert cfg.train.lr == 1e-4 and cfg.train.mixed_precision == "no"
    assert cfg.eval.every == -1 and cfg.eval.suite == FlowGRPOConfig().eval.suite
    assert (
        cfg.train is train
    )  # a section is filled in place: a caller holding it sees the values the run uses


def test_a_config_built_in_python_is_validated_as_a_loaded_one_is(tmp_path) -> None:
    """The checks across keys that load_config runs (here: a penalty with weight 0) were skipped for a config built
    in Python."""
    cfg = _config(tmp_path)
    cfg.objective.penalty = "vnorm"
    cfg.objective.penalty_weight = 0.0
    with pytest.raises(
        ConfigError, match=r"objective\.penalty='vnorm' with objective\.penalty_weight=0 adds nothing"
    ):
        FlowGRPOTrainer(cfg).setup()

"""The benches' config (trainers.testing.bench_config) turns the in-loop evaluation off without a warning."""

from __future__ import annotations

from pathlib import Path

from imgalign.config import load_config
from imgalign.trainers.config import FlowGRPOConfig, ignored_settings
from imgalign.trainers.testing import bench_config

DEFAULT = str(Path(__file__).resolve().parents[1] / "examples" / "shapes" / "flow_grpo.yaml")


def test_a_bench_of_the_default_config_is_warned_of_no_unread_setting() -> None:
    """The default config sets eval.guidance_scale; with the bench's eval.every=-1 that was warned as unread at
    the start of every bench run, a warning the user had not caused."""
    assert ignored_settings(load_config(FlowGRPOConfig, DEFAULT, ["eval.every=-1"]))  # the warning's cause
    cfg = bench_config(DEFAULT, [])
    assert ignored_settings(cfg) == [] and cfg.eval.every == -1 and not cfg.eval.at_start


def test_a_bench_keeps_the_eval_suite_that_holds_prompts_out_of_training() -> None:
    cfg = bench_config(DEFAULT, ["eval.suite=reward", "prompts.source=generate:0"])
    assert cfg.eval.suite == "reward" and cfg.eval.every == -1
    # and the rest of the config as given
    assert cfg.prompts.source == "generate:0" and cfg.log.sample_every == 0

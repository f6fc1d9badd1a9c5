import re

import pytest

from imgalign.config import ConfigError, load_config
from imgalign.trainers.config import FlowGRPOConfig, LogConfig


def test_a_bare_tilde_output_dir_is_refused_like_a_tilde_path():
    """A quoted '~' alone (no '/' after it) is a folder named '~' in the working folder, not the home folder."""
    with pytest.raises(
        ConfigError, match=re.escape("log.output_dir '~' would be written under a folder named '~'")
    ):
        LogConfig(output_dir="~").validate()
    with pytest.raises(ConfigError, match="folder named '~' in the working folder"):
        load_config(FlowGRPOConfig, None, ["log.output_dir='~'"])
    # a name that only starts with ~ is an ordinary folder name
    LogConfig(output_dir="~a").validate()


def test_a_one_step_sde_window_is_refused_with_tree_rollouts():
    """The smallest window (1) is refused as any other: a tree's trained steps are its branch steps."""
    load_config(FlowGRPOConfig, None, ["sampling.rollout=tree"])  # the tree defaults are valid
    with pytest.raises(ConfigError, match="sampling.sde_window must be 0 with sampling.rollout=tree"):
        load_config(FlowGRPOConfig, None, ["sampling.rollout=tree", "sampling.sde_window=1"])

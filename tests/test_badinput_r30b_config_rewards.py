"""Bad-input round 30b: a reward spec whose option has no '=' is refused under rewards.names, as every other bad
spec is (by ``--print-config`` and by the run's start-up checks alike)."""

from __future__ import annotations

import pytest

from imgalign.config import ConfigError, load_config
from imgalign.trainers.config import FlowGRPOConfig
from imgalign.trainers.trainer import check_reward_names


@pytest.mark.parametrize("spec", ["geneval:mode", "geneval:mode=strict,soft"])
def test_an_option_without_a_value_is_refused_naming_rewards_names(spec: str) -> None:
    """parse_reward_spec's ValueError escaped check_reward_names unwrapped: `imgalign train --set
    rewards.names=geneval:mode` said "reward option 'mode' in 'geneval:mode' must look like key=value", naming no
    config key (an unknown reward or a bad option value says rewards.names), and it was no ConfigError."""
    cfg = load_config(FlowGRPOConfig, None, [f"rewards.names=['{spec}']"])
    with pytest.raises(
        ConfigError, match=rf"^rewards\.names: '{spec}': reward option .* must look like key=value"
    ):
        check_reward_names(cfg)

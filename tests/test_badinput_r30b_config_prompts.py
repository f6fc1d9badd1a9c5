"""Bad-input round 30b: a malformed generate:SEED as prompts.source refused by the config's own checks (so by
``--print-config`` too), naming prompts.source."""

from __future__ import annotations

import pytest

from imgalign.config import ConfigError, load_config
from imgalign.trainers.config import FlowGRPOConfig


@pytest.mark.parametrize(
    ("source", "wanted"),
    [
        (
            "generate:abc",
            r"prompts\.source: prompt set 'generate:abc': expected generate:SEED with an integer seed",
        ),
        (
            "generate:",
            r"prompts\.source: prompt set 'generate:': expected generate:SEED with an integer seed",
        ),
        ("generate: 5", r"prompts\.source: prompt set 'generate: 5': expected generate:SEED"),
        (
            "generate:-1",
            r"prompts\.source: prompt set 'generate:-1': the seed of generate:SEED must be 0 or more",
        ),
    ],
)
def test_a_malformed_generate_seed_is_refused_by_the_config(source: str, wanted: str) -> None:
    """`imgalign train --print-config --set prompts.source=generate:abc` printed the config with exit 0 and the run
    then refused the same value ("prompt set 'generate:abc': ...", naming no key): the config checks now refuse
    it, under prompts.source."""
    with pytest.raises(ConfigError, match=wanted):
        load_config(FlowGRPOConfig, None, [f"prompts.source={source}"])


def test_a_well_formed_generate_seed_passes_the_config() -> None:
    """generate:0 and generate:12 are seeds the run draws prompts with: the new check refuses neither."""
    for source in ("generate:0", "generate:12"):
        assert load_config(FlowGRPOConfig, None, [f"prompts.source={source}"]).prompts.source == source

"""Mutation round 30b (trainers/config.py): every model.family the message lists as valid loads (the refusal of
an unlisted one is pinned in tests/test_config_mutations_s55.py)."""

import pytest

from imgalign.config import load_config
from imgalign.trainers.config import FlowGRPOConfig


@pytest.mark.parametrize("family", ["auto", "sd3", "flux"])
def test_each_listed_model_family_loads(family):
    cfg = load_config(FlowGRPOConfig, None, [f"model.family={family}"])
    assert cfg.model.family == family

"""Round 36m (training settings at their extremes): a learning rate whose first AdamW update overflows float32
(train.lr=1e39) passed the config and raised torch's "value cannot be converted to type float without overflow"
as a traceback at the first update, after the model loaded; train.ema_decay=1 was refused without its value."""

from __future__ import annotations

import re

import pytest

from imgalign.config import ConfigError, load_config
from imgalign.trainers.config import FlowGRPOConfig


@pytest.mark.parametrize(
    ("sets", "step", "below"),
    [
        (["train.lr=1e39"], "1e+40", "3.4e+37"),
        (["train.lr=1e38"], "1e+39", "3.4e+37"),
        (["train.lr=1e38", "train.adam_beta1=0.99"], "1e+40", "3.4e+36"),
    ],
)
def test_a_learning_rate_whose_first_update_overflows_float32_is_refused(sets, step, below):
    lr = sets[0].split("=")[1]
    with pytest.raises(ConfigError) as e:
        load_config(FlowGRPOConfig, None, sets)
    assert str(e.value) == (
        f"train.lr={float(lr):g}: AdamW's first update moves a float32 weight by up to lr / (1 - train.adam_beta1) "
        f"= {step}, beyond float32's largest value 3.403e+38; give train.lr below {below} (usual: 1e-5 to 1e-3)"
    )


@pytest.mark.parametrize(
    "sets",
    [["train.lr=3e37"], ["train.lr=3.4e38", "train.adam_beta1=0"], ["train.lr=1e30", "train.adam_beta1=1"]],
)
def test_the_largest_learning_rates_float32_holds_pass_or_meet_their_own_check(sets):
    if sets[-1] == "train.adam_beta1=1":  # no division by zero: beta1's own range check names it
        with pytest.raises(ConfigError, match=re.escape("train.adam_beta1 must be in [0, 1) (got 1.0)")):
            load_config(FlowGRPOConfig, None, sets)
        return
    assert load_config(FlowGRPOConfig, None, sets).train.lr == float(sets[0].split("=")[1])


@pytest.mark.parametrize("value", ["1", "1.5", "-0.1"])
def test_ema_decay_out_of_range_names_its_value(value):
    with pytest.raises(
        ConfigError, match=re.escape(f"train.ema_decay must be in [0, 1) (0 = off; got {float(value)})")
    ):
        load_config(FlowGRPOConfig, None, [f"train.ema_decay={value}"])

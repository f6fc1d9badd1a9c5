"""A model that does not load is said in one line: transformers' error for an unknown model_type is several
paragraphs of upgrade advice (round 24's note on the detector's refusal)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgalign.hub import cannot_load, load_error_reason


def test_an_unknown_model_type_is_said_in_one_line_without_the_upgrade_advice(tmp_path: Path) -> None:
    from transformers import AutoConfig

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "not-a-model-type"}))
    with pytest.raises(ValueError) as e:
        AutoConfig.from_pretrained(str(tmp_path))
    assert "\n" in str(e.value)  # what transformers says: several lines
    said = cannot_load("detector 'det'", e.value, str(tmp_path))
    assert "\n" not in said and "not-a-model-type" in said and "pip install" not in said, said
    assert said.endswith(
        "Give a folder saved with save_pretrained or a Hub id already downloaded (the Hub is not "
        "contacted when HF_HUB_OFFLINE=1)"
    )


def test_a_reason_is_the_first_line_of_the_error() -> None:
    error = ValueError("\n  first line.\n  second line\n\nSecond paragraph: advice.\n")
    assert load_error_reason(error) == "first line"

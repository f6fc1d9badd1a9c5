"""Config habits of other tools (round 36j)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.config import ConfigError, load_config
from imgalign.trainers.config import FlowGRPOConfig


@pytest.mark.parametrize("key", ["path", "file", "Prompt_File"])
def test_another_tools_name_for_the_prompt_file_points_to_prompts_source(tmp_path: Path, key: str) -> None:
    """`prompts.path: p.txt` was asked "did you mean model.path?": setting that would load the prompt file as the
    model. The key is pointed to prompts.source, in a file and in --set alike."""
    config = tmp_path / "c.yaml"
    config.write_text(f"prompts:\n  {key}: p.txt\n")
    with pytest.raises(ConfigError) as e:
        load_config(FlowGRPOConfig, config)
    assert str(e.value).endswith("; did you mean prompts.source?") and "model.path" not in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_config(FlowGRPOConfig, None, [f"prompts.{key}=p.txt"])
    assert str(e.value).endswith("; did you mean prompts.source?") and "model.path" not in str(e.value)


def test_a_key_given_at_another_level_is_still_pointed_there() -> None:
    with pytest.raises(ConfigError, match=r"did you mean model\.path\?"):
        load_config(FlowGRPOConfig, None, ["train.path=x"])

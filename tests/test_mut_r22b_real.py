"""eval/real.py, mutation round 22 (second pass): the tests that killed its surviving mutants."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from imgalign.eval.real import generate_metadata, load_prompt_set

WARNING = "scores are comparable only with runs on this same set"


def test_a_generated_prompt_set_warns_that_its_scores_compare_only_with_runs_on_the_same_set(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """generate:SEED draws its own prompts, so its scores are not GenEval's published numbers: the user is told so
    each time such a set is loaded, and not when the set is a metadata file."""
    with caplog.at_level(logging.WARNING, logger="imgalign.eval.real"):
        assert load_prompt_set("generate:3") == generate_metadata(3)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and WARNING in r.getMessage()]
    assert len(warned) == 1 and warned[0].name == "imgalign.eval.real"

    caplog.clear()
    path = tmp_path / "metadata.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in generate_metadata(0)[:2]))
    with caplog.at_level(logging.WARNING, logger="imgalign.eval.real"):
        assert [m["prompt"] for m in load_prompt_set(str(path))] == [
            m["prompt"] for m in generate_metadata(0)[:2]
        ]
    assert not [r for r in caplog.records if WARNING in r.getMessage()]

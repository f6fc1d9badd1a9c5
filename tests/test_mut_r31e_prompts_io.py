"""Mutation round 31 (helper e): prompts/io.py says a missing GenEval metadata file does not exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from imgalign.prompts.io import PromptFileError, load_geneval_metadata


def test_a_missing_metadata_file_is_said_not_to_exist(tmp_path: Path) -> None:
    missing = tmp_path / "evaluation_metadata.jsonl"
    with pytest.raises(PromptFileError, match=re.escape(f"metadata file {str(missing)!r} does not exist")):
        load_geneval_metadata(missing)

"""Paths copied from Windows (round 36j): 'data\\p.txt' names no folder here, where '\\' is part of a name."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.hub import tilde_hint
from imgalign.prompts.io import PromptFileError, load_geneval_metadata, load_prompts
from imgalign.trainers.prompting import check_prompt_source

HINT = "a Windows path: here '\\' is part of a name, not a folder separator; write '/' between folders"


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "p.txt").write_text("a red circle\n")
    (tmp_path / "data" / "m.jsonl").write_text("")
    return tmp_path


def test_a_windows_prompt_path_says_to_write_slashes(data_dir: Path) -> None:
    """`prompts.source: data\\p.txt` (train), `--prompts data\\p.txt` (grid) and `--prompts data\\m.jsonl` (eval)
    said only "does not exist", the '\\' shown doubled in the quotes, where data/p.txt is there."""
    with pytest.raises(FileNotFoundError) as e:
        check_prompt_source("data\\p.txt")
    assert f"({HINT}, 'data/p.txt')" in str(e.value)
    with pytest.raises(PromptFileError) as e:
        load_prompts("data\\p.txt")
    assert str(e.value) == f"prompt file 'data\\\\p.txt' does not exist ({HINT}, 'data/p.txt')"
    with pytest.raises(PromptFileError) as e:
        load_geneval_metadata("data\\m.jsonl")
    assert str(e.value) == f"metadata file 'data\\\\m.jsonl' does not exist ({HINT}, 'data/m.jsonl')"


def test_a_windows_model_folder_path_says_to_write_slashes(data_dir: Path) -> None:
    assert tilde_hint(".\\data") == f" ({HINT}, './data')"
    assert tilde_hint("data\\other.txt") == ""  # no such file either way: nothing to suggest
    assert tilde_hint("data/p.txt") == ""

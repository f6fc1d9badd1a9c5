"""A .jsonl whose lines are plain prompts is told what a .jsonl line is (own fixes, stop 57)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.prompts.io import PromptFileError, load_geneval_metadata, load_prompts


def test_a_prompt_list_saved_as_jsonl_is_told_to_use_txt(tmp_path: Path) -> None:
    path = tmp_path / "prompts.jsonl"
    path.write_text("a photo of a cat\na photo of a dog\n")
    with pytest.raises(PromptFileError) as e:
        load_prompts(path)
    message = str(e.value)
    assert f"{path}:1: not valid JSON" in message
    assert "plain text" in message and '{"prompt": "a photo of a cat"}' in message and ".txt file" in message


def test_a_metadata_file_of_plain_prompts_is_shown_a_geneval_line(tmp_path: Path) -> None:
    path = tmp_path / "meta.jsonl"
    path.write_text(
        '{"tag": "single_object", "include": [{"class": "cat", "count": 1}], "prompt": "a cat"}\n3 dogs\n'
    )
    with pytest.raises(PromptFileError) as e:
        load_geneval_metadata(path)
    message = str(e.value)
    assert (
        f"{path}:2: not valid JSON" in message
        and "plain text" in message
        and '"tag": "single_object"' in message
    )


def test_a_damaged_json_line_gets_no_plain_text_hint(tmp_path: Path) -> None:
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "a photo of a cat"\n')
    with pytest.raises(PromptFileError) as e:
        load_prompts(path)
    assert "not valid JSON" in str(e.value) and "plain text" not in str(e.value)


def test_a_key_given_twice_in_one_line_is_refused_naming_both_values(tmp_path: Path) -> None:
    """json.loads keeps the last of two equal keys: {"prompt": "a cat", "prompt": "a dog"} trained on the dog,
    silently; also a GenEval clause naming two classes."""
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "a cat"}\n{"prompt": "a cat", "prompt": "a dog"}\n')
    with pytest.raises(
        PromptFileError, match=rf"{path}:2: key 'prompt' appears twice in one object \('a cat' and "
    ):
        load_prompts(path)
    meta = tmp_path / "meta.jsonl"
    meta.write_text(
        '{"tag": "single_object", "include": [{"class": "cat", "class": "dog", "count": 1}], "prompt": "a cat"}\n'
    )
    with pytest.raises(PromptFileError, match=rf"{meta}:1: key 'class' appears twice"):
        load_geneval_metadata(meta)

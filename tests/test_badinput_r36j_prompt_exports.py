"""Prompt files as other tools write them (round 36j)."""

import csv

import pytest

from imgalign.prompts.io import PromptFileError, load_prompts


def test_a_csv_export_saved_as_txt_is_named_in_a_warning(tmp_path, caplog):
    """A one-column CSV (pandas' or a spreadsheet's export) saved as .txt: its header 'prompt' and the quotes CSV
    puts around a prompt holding a comma were trained on as prompt text without a word."""
    path = tmp_path / "prompts.txt"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)  # \r\n line ends, as csv writes them
        for row in (
            ["prompt"],
            ["a red circle, on the left"],
            ["a blue square"],
            ['a sign saying "hi", red'],
        ):
            w.writerow(row)
    with caplog.at_level("WARNING", logger="imgalign.prompts.io"):
        got = [r.prompt for r in load_prompts(path)]
    # the lines stay prompts as written (a prompt may be quoted), and the warning says which are suspect
    assert got == ["prompt", '"a red circle, on the left"', "a blue square", '"a sign saying ""hi"", red"']
    assert f"prompt file {str(path)!r} looks like a CSV export" in caplog.text
    assert "line 1 is 'prompt', a column header, and 2 line(s)" in caplog.text
    assert "2 line(s) are wrapped in double quotes (first: line 2)" in caplog.text


def test_a_plain_txt_prompt_file_gives_no_csv_warning(tmp_path, caplog):
    path = tmp_path / "prompts.txt"
    path.write_text('a red circle\na sign that says "prompt"\n"\nprompt engineering\n', encoding="utf-8")
    with caplog.at_level("WARNING", logger="imgalign.prompts.io"):
        assert len(load_prompts(path)) == 4
    assert "CSV" not in caplog.text


def test_a_jsonl_line_with_another_tools_prompt_key_is_named(tmp_path):
    """{"text": ...} (a Hugging Face dataset's to_json), {"Prompt": ...} or {"caption": ...} was told only that the
    line needs a 'prompt', not which key it has instead."""
    for key in ("text", "Prompt", "caption"):
        path = tmp_path / "p.jsonl"
        path.write_text(f'{{"id": 3, "{key}": "a cat"}}\n')
        with pytest.raises(PromptFileError) as e:
            load_prompts(path)
        assert str(e.value) == (
            f"{path}:1: each line needs a non-empty string field 'prompt' (the line has {key!r}: rename it 'prompt')"
        )
    for line in ('{"prompt": null, "text": "a cat"}', "5", '["a cat"]', '{"id": 3}'):
        path.write_text(line + "\n")
        with pytest.raises(PromptFileError) as e:
            load_prompts(path)
        assert str(e.value) == f"{path}:1: each line needs a non-empty string field 'prompt'"

"""Mutation round 15: prompt files (prompts/io.py) behaviour no earlier test checked."""

from __future__ import annotations

import json

import pytest

from imgalign.prompts.io import PromptFileError, load_geneval_metadata, load_prompts

LINE = {"tag": "single_object", "include": [{"class": "circle", "count": 1}], "prompt": "a photo of a circle"}


def _write(path, *rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("key", ["Exclude", "EXCLUDES"])
def test_a_near_miss_of_exclude_in_another_case_is_refused(tmp_path, key):
    """'Exclude' is no key GenEval reads either: its clauses went unjudged as an 'excludes' did."""
    meta = tmp_path / "m.jsonl"
    _write(meta, {**LINE, key: [{"class": "square", "count": 1}]})
    with pytest.raises(PromptFileError) as e:
        load_geneval_metadata(meta)
    assert str(e.value) == (
        f"{meta}:1: field {key!r} is not GenEval's, so its clauses would not be judged; spell it 'exclude'"
    )


@pytest.mark.parametrize("value", [3, None, ["circle"]])
def test_an_include_class_that_is_not_a_string_is_refused(tmp_path, value):
    """A clause whose class is present but no string (a number, null, a list) was accepted; only a missing class was
    refused."""
    meta = tmp_path / "m.jsonl"
    _write(meta, {**LINE, "include": [{"class": value, "count": 1}]})
    with pytest.raises(PromptFileError, match=r"m\.jsonl:1: include\[0\]\.class must be a string"):
        load_geneval_metadata(meta)


@pytest.mark.parametrize("name", ["p.txt", "prompts"])
def test_an_indented_json_line_in_a_txt_file_is_refused_too(tmp_path, name):
    """A JSON object line indented by spaces or a tab is still a .jsonl line under a .txt name: trained on as JSON
    text without a word."""
    path = tmp_path / name
    path.write_text("a blue square\n\t " + json.dumps({"prompt": "a red circle"}) + "\n")
    with pytest.raises(
        PromptFileError, match=rf"{name}:2: the line is a JSON object, .* rename the file to \.jsonl"
    ):
        load_prompts(path)


def test_first_line_raises_the_callers_error_and_ends_the_line_at_a_newline_only(tmp_path):
    """first_line (a prompt folder's metadata.jsonl, read by score and the eval suite): the caller's error type for a
    file that is not UTF-8, leading blank lines and spaces dropped, "" for an empty file, and a U+2028 or U+0085
    inside a JSON string is no line end."""
    from imgalign.prompts.io import first_line

    class MyError(Exception):
        pass

    path = tmp_path / "metadata.jsonl"
    path.write_text('{"prompt": "a"}\n', encoding="utf-16")
    with pytest.raises(
        MyError, match=r"cannot read metadata file '.*metadata\.jsonl': it is UTF-16 text, not UTF-8"
    ):
        first_line(path, "metadata file", MyError)
    path.write_bytes(b'{"prompt": "caf\xe9"}\n')  # Latin-1
    with pytest.raises(MyError, match=r"cannot read metadata file '.*metadata\.jsonl': it is not UTF-8 text"):
        first_line(path, "metadata file", MyError)
    row = json.dumps({"prompt": "a red\u2028circle\x85!"}, ensure_ascii=False)
    path.write_text(f"\n \n  {row}\n{json.dumps(LINE)}\n", encoding="utf-8")
    assert first_line(path, "metadata file") == row
    path.write_text(" \n\n")
    assert first_line(path, "metadata file") == ""


@pytest.mark.parametrize(
    "relation, fix",
    [
        ("left", "did you mean 'left of'?"),
        ("to the right of", "did you mean 'right of'?"),
        ("beside", "spell it as GenEval does"),
    ],
)
def test_a_position_relation_geneval_does_not_judge_is_refused(tmp_path, relation, fix):
    """A relation other than GenEval's four ('left', 'to the right of') was accepted: eval failed every image of the
    prompt ("expected circle left target") without a word, and the dense geneval reward raised KeyError: 'left'."""
    line = {
        "tag": "position",
        "include": [
            {"class": "square", "count": 1},
            {"class": "circle", "count": 1, "position": [relation, 0]},
        ],
        "prompt": "a photo of a circle left of a square",
    }
    meta = tmp_path / "m.jsonl"
    _write(meta, line)
    with pytest.raises(PromptFileError) as e:
        load_geneval_metadata(meta)
    assert str(e.value) == (
        f"{meta}:1: include[1].position: relation {relation!r} is not one GenEval judges (left of, right of, above, "
        f"below), so no image could pass: {fix}"
    )
    with pytest.raises(PromptFileError, match="is not one GenEval judges"):
        load_prompts(meta)
    for good in ("left of", "right of", "above", "below"):
        _write(meta, {**line, "include": [line["include"][0], {**line["include"][1], "position": [good, 0]}]})
        assert load_geneval_metadata(meta)[0]["include"][1]["position"] == [good, 0]

"""Bad-input round 18: users' own prompt files wherever they are read (`imgalign train` prompts.source, `imgalign
grid --prompts`, `imgalign score --prompts`, `imgalign eval --prompts` GenEval metadata)."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from imgalign.cli import main
from imgalign.prompts.io import PromptFileError, load_geneval_metadata, load_prompts
from imgalign.trainers.testing import write_config

COLORS_LINE = {
    "tag": "colors",
    "include": [{"class": "circle", "count": 1, "color": "red"}],
    "prompt": "a photo of a red circle",
}


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
@pytest.mark.parametrize("name", ["p.txt", "p.jsonl", "m.jsonl"])
def test_utf16_without_a_bom_is_refused_not_read_as_nul_riddled_prompts(tmp_path, encoding, name):
    """UTF-16 saved without a byte-order mark is valid UTF-8 with a NUL beside every ASCII letter: a .txt trained on
    'a\\x00 \\x00r\\x00e\\x00d...' without a word, and a .jsonl said only "not valid JSON". Now the file is named,
    with the line of the first NUL and what to do."""
    path = tmp_path / name
    text = json.dumps(COLORS_LINE) if name.endswith(".jsonl") else "a red circle"
    path.write_text(text + "\n", encoding=encoding)
    load = load_geneval_metadata if name == "m.jsonl" else load_prompts
    with pytest.raises(PromptFileError) as e:
        load(path)
    assert str(e.value) == (
        f"cannot read {'metadata' if name == 'm.jsonl' else 'prompt'} file {str(path)!r}: it is not UTF-8 text "
        "(line 1 holds a NUL character, as UTF-16 text or a binary file does); save it as UTF-8"
    )


def test_a_nul_past_the_first_line_is_named_by_its_line(tmp_path):
    path = tmp_path / "p.txt"
    path.write_bytes(b"a red circle\r\na blue square\r\na gr\x00een cross\r\n")
    with pytest.raises(PromptFileError, match=r"line 3 holds a NUL character"):
        load_prompts(path)


def test_train_and_score_refuse_a_utf16_prompt_file_before_any_model_loads(sd3_dir, tmp_path, capsys):
    """The CLIs say it too (exit status 2, one line, nothing written)."""
    prompts = tmp_path / "p.txt"
    prompts.write_text("a red circle\na blue square\n", encoding="utf-16-le")
    cfg = {
        "model": {"path": str(sd3_dir)},
        "prompts": {"source": str(prompts)},
        "sampling": {"num_steps": 2, "group_size": 2, "samples_per_step": 2, "batch_size": 2},
        "rewards": {"names": ["imgalign.trainers.testing:red_reward"]},
        "train": {"max_steps": 1, "micro_batch_size": 2},
        "eval": {"every": -1},
        "log": {"output_dir": str(tmp_path / "run"), "sample_every": 0, "trackers": "none"},
    }
    assert main(["train", str(write_config(cfg, tmp_path / "c.yaml"))]) == 2
    assert "line 1 holds a NUL character" in capsys.readouterr().err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
    image = tmp_path / "a.png"
    Image.new("RGB", (8, 8)).save(image)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"file": "a.png", "prompt": "a red circle"}) + "\n", encoding="utf-16-le")
    out = tmp_path / "s.jsonl"
    assert main(["score", str(image), "--reward", "artifact", "--prompts", str(rows), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"cannot read prompt file {str(rows)!r}: it is not UTF-8 text (line 1 holds a NUL character" in err
    assert not out.exists()


@pytest.mark.parametrize("name", ["p.txt", "prompts"])
def test_jsonl_lines_in_a_txt_file_are_refused_not_trained_on_as_json_text(tmp_path, name):
    """A .jsonl saved as .txt (or without a suffix) trained on '{"prompt": "a photo of a red circle"}' as the prompt
    text, without a word; now the line is named and the fix is said. Braces that are not a JSON object stay a
    prompt."""
    path = tmp_path / name
    path.write_text("a blue square\n" + json.dumps(COLORS_LINE) + "\n")
    with pytest.raises(PromptFileError) as e:
        load_prompts(path)
    assert str(e.value).startswith(f"{path}:2: the line is a JSON object, and a ")
    assert str(e.value).endswith("rename the file to .jsonl")
    path.write_text("a blue square\n{a red circle}\n{}x\n")
    assert [r.prompt for r in load_prompts(path)] == ["a blue square", "{a red circle}", "{}x"]


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            {"include": [{"class": "circle", "count": 1, "colour": "red"}]},
            "include[0]: key 'colour' is not one GenEval reads (class, count, color, position), so it would not be "
            "judged: did you mean 'color'?",
        ),
        (
            {
                "tag": "position",
                "include": [{"class": "square"}, {"class": "circle", "positon": ["left of", 0]}],
            },
            "include[1]: key 'positon' is not one GenEval reads (class, count, color, position), so it would not "
            "be judged: did you mean 'position'?",
        ),
        (
            {"exclude": [{"class": "circle", "count": 2, "colr": "red"}]},
            "exclude[0]: key 'colr' is not one GenEval reads (class, count), so it would not be judged: delete it "
            "or spell it as GenEval does",
        ),
        (
            {
                "tag": "counting",
                "include": [{"class": "circle", "count": 2}],
                "excludes": [{"class": "circle", "count": 3}],
            },
            "field 'excludes' is not GenEval's, so its clauses would not be judged; spell it 'exclude'",
        ),
    ],
)
def test_a_misspelt_geneval_key_is_refused_not_left_unjudged(tmp_path, edit, message):
    """A clause's 'colour' or 'positon', or a line's 'excludes', was read past: the colour, position or exclusion was
    never judged, a lenient GenEval score without a word (eval, train on a GenEval .jsonl, score, grid alike).
    Extra keys outside the clauses (a user's own 'id') stay allowed."""
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({**COLORS_LINE, **edit}) + "\n")
    with pytest.raises(PromptFileError) as e:
        load_geneval_metadata(path)
    assert str(e.value) == f"{path}:1: {message}"
    with pytest.raises(PromptFileError, match="would not be judged"):
        load_prompts(path)
    path.write_text(json.dumps({**COLORS_LINE, "id": 7, "exclusions": "mine"}) + "\n")
    assert load_geneval_metadata(path)[0]["id"] == 7


def test_score_reads_a_prompt_row_holding_a_line_separator(tmp_path, capsys):
    """JSON may hold U+2028 / U+0085 unescaped inside a string (json.dumps(ensure_ascii=False) and JavaScript write
    it so); `score --prompts`, a GenEval folder's metadata.jsonl and --baseline split rows with str.splitlines, which
    cuts there: a valid file was refused as "not valid JSON (Unterminated string...)"."""
    from imgalign.commands.score import _read_geneval_meta, load_baseline, load_prompt_map

    prompt = "a red\u2028circle\x85on white"
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        json.dumps({"file": "a.png", "prompt": prompt}, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    assert load_prompt_map(rows)["a.png"]["prompt"] == prompt
    meta = tmp_path / "metadata.jsonl"
    meta.write_text(
        json.dumps({**COLORS_LINE, "prompt": prompt}, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    assert _read_geneval_meta(meta)["prompt"] == prompt
    base = tmp_path / "base.jsonl"
    row = {"file": "a.png", "prompt": prompt, "scores": {"artifact": 0.5}, "error": None}
    base.write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    assert load_baseline(base)["a.png"]["prompt"] == prompt
    image = tmp_path / "a.png"
    Image.new("RGB", (8, 8), (255, 0, 0)).save(image)
    out = tmp_path / "s.jsonl"
    reward = "imgalign.trainers.testing:red_reward"
    assert main(["score", str(image), "--reward", reward, "--prompts", str(rows), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["prompt"] == prompt


@pytest.mark.parametrize("document", [[COLORS_LINE, COLORS_LINE], COLORS_LINE])
def test_an_indented_json_file_given_as_jsonl_is_named_as_such(tmp_path, document):
    """A prompt list saved as one indented JSON document (an array, or one object) said only "line 1: not valid
    JSON (Expecting value)" of a file that is valid JSON: now the error says it is not one object per line."""
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(document, indent=2) + "\n")
    for load in (load_prompts, load_geneval_metadata):
        with pytest.raises(PromptFileError) as e:
            load(path)
        assert str(e.value).startswith(f"{path}:1: not valid JSON (")
        assert "the file is one JSON document over several lines" in str(e.value)
        assert "a .jsonl holds one JSON object per line" in str(e.value)
    path.write_text(json.dumps(COLORS_LINE) + "\n{\n")  # a line cut short is not called a JSON document
    with pytest.raises(PromptFileError) as e:
        load_prompts(path)
    assert str(e.value) == f"{path}:2: not valid JSON (Expecting property name enclosed in double quotes)"


def test_grid_shows_a_repeated_prompt_once(tmp_path, caplog, capsys):
    """A prompt listed twice in --prompts gave two rows of the same images (the seeds are shared) and cost every
    model the repeat; --seeds already refuses a repeated seed. A file's repeats are shown once, said in the log
    (before --max-prompts counts); a --prompt typed twice is refused."""
    import argparse

    from imgalign.commands.grid import read_rows

    path = tmp_path / "p.jsonl"
    lines = [COLORS_LINE, {"prompt": "a blue square"}, {**COLORS_LINE, "tag": "color_attr"}, {"prompt": "x"}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    args = argparse.Namespace(prompts=str(path), prompt=None, max_prompts=3)
    with caplog.at_level("WARNING"):
        prompts, metas = read_rows(args)
    assert prompts == ["a photo of a red circle", "a blue square", "x"]
    assert metas == [COLORS_LINE, None, None]  # the first line of a repeated prompt keeps its metadata
    assert (
        "p.jsonl repeats 1 prompt(s) (first: 'a photo of a red circle'); the grid shows each once"
        in caplog.text
    )
    assert "--max-prompts" not in caplog.text
    out = tmp_path / "g.png"
    assert main(["grid", "--model", "shapes", "--prompt", "a", "--prompt", " a ", "--out", str(out)]) == 2
    assert "--prompt 'a' is given twice: its rows would be the same images twice" in capsys.readouterr().err
    assert not out.exists()


def test_a_tag_of_the_users_own_is_told_to_be_read_as_geneval(tmp_path):
    """{"prompt": ..., "tag": "animals"} said only "field 'include' is missing" to a user who never asked for
    GenEval; now it says why the line is read as GenEval metadata and what to do. A GenEval line is unchanged."""
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "a cat on a sofa", "tag": "animals"}) + "\n")
    with pytest.raises(PromptFileError) as e:
        load_prompts(path)
    assert str(e.value) == (
        f"{path}:1: field 'include' is missing; a line with a 'tag' field is read as GenEval metadata (tag, "
        "include, prompt): rename 'tag' if it is a label of your own"
    )
    path.write_text(json.dumps({**COLORS_LINE, "tag": "colour"}) + "\n")
    with pytest.raises(PromptFileError, match=r"field 'tag' is 'colour', not a GenEval task .*does$"):
        load_prompts(path)
    from imgalign.cli import CLIError
    from imgalign.commands.score import load_prompt_map

    path.write_text(json.dumps({"file": "a.png", "prompt": "a cat", "tag": "animals"}) + "\n")
    with pytest.raises(
        CLIError, match=r"field 'include' is missing; a line with a 'tag' field is read as GenEval"
    ):
        load_prompt_map(path)


def test_prompt_settings_a_run_does_not_read_are_listed_as_unused():
    """prompts.tasks=[counting] with a GenEval .jsonl as prompts.source trained on every task of the file (tasks
    filters only the shapes generator), and prompts.test_fraction held out nothing outside eval.suite=reward with a
    file: both silently. They are now listed with the run's other unread settings."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig, ignored_settings

    def unused(*sets: str) -> list[str]:
        return ignored_settings(load_config(FlowGRPOConfig, None, list(sets)))

    assert unused("prompts.source=p.jsonl", "prompts.tasks=[counting]") == [
        "prompts.tasks (read with prompts.source=shapes)"
    ]
    assert unused("prompts.tasks=[counting]") == []
    fraction = "prompts.test_fraction (read with eval.suite=reward and a prompt file or generate:SEED)"
    assert unused("prompts.test_fraction=0.3") == [fraction]
    assert unused("prompts.source=p.txt", "prompts.test_fraction=0.3") == [fraction]
    assert unused("prompts.source=p.txt", "prompts.test_fraction=0.3", "eval.suite=reward") == []


@pytest.mark.parametrize(
    "source, message",
    [
        ("", "prompts.source is empty: give 'shapes', a .txt/.jsonl prompt file or generate:SEED"),
        ("  ", "prompts.source is empty"),
        ("SHAPES", "prompts.source 'SHAPES' is no file; the shapes-world generator is spelt 'shapes'"),
        (" shapes", "prompts.source ' shapes' is no file; the shapes-world generator is spelt 'shapes'"),
    ],
)
def test_an_empty_or_misspelt_shapes_source_is_named(source, message):
    """An empty prompts.source was called "a folder" (Path('') is the working folder); 'SHAPES' "does not exist"."""
    from imgalign.config import ConfigError
    from imgalign.trainers.config import PromptConfig

    with pytest.raises(ConfigError) as e:
        PromptConfig(source=source).validate()
    assert str(e.value).startswith(message)


@pytest.mark.parametrize(
    "line, needed",
    [
        ({**COLORS_LINE, "include": [{"class": "circle", "count": 1}]}, "color"),
        (
            {**COLORS_LINE, "tag": "color_attr", "include": [{"class": "circle"}, {"class": "square"}]},
            "color",
        ),
        (
            {**COLORS_LINE, "tag": "position", "include": [{"class": "circle"}, {"class": "square"}]},
            "position",
        ),
    ],
)
def test_a_colors_or_position_line_without_its_clause_is_refused(tmp_path, line, needed):
    """tag 'colors' with no clause naming a colour (or 'position' with no position) judged the objects alone and
    counted the image as passing that task: a colour-blind score filed under colours, without a word."""
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(PromptFileError) as e:
        load_geneval_metadata(path)
    assert str(e.value).startswith(
        f"{path}:1: tag {line['tag']!r} asks for an include clause with a {needed!r}, and none has one, so the "
        f"{needed} would not be judged: give it (e.g. "
    )
    assert str(e.value).endswith("or the tag of what the prompt asks")


def test_a_lone_surrogate_escape_in_a_prompt_is_refused_before_any_model_loads(tmp_path):
    """'\\ud83d' without its pair is valid JSON but no character: train and grid died in the tokenizer with
    "TypeError: TextEncodeInput must be Union[...]" after the model had loaded. Prompt files, GenEval metadata and
    score's rows now name the line; a whole pair (an emoji) is read."""
    from imgalign.cli import CLIError
    from imgalign.commands.score import load_prompt_map

    half = "a red circle \ud83d"  # json.dumps writes it as the escape \\ud83d
    message = (
        ":1: the prompt holds \\ud83d, half of a UTF-16 surrogate pair without its other half, which is no "
        "character: write the character itself, or both halves of its escape"
    )
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": half}) + "\n")
    with pytest.raises(PromptFileError) as e:
        load_prompts(path)
    assert str(e.value) == f"{path}{message}"
    path.write_text(json.dumps({"prompt": half + "\udd34"}) + "\n")
    assert load_prompts(path)[0].prompt == "a red circle \U0001f534"
    meta = tmp_path / "m.jsonl"
    meta.write_text(json.dumps({**COLORS_LINE, "prompt": half}) + "\n")
    with pytest.raises(PromptFileError) as e:
        load_geneval_metadata(meta)
    assert str(e.value) == f"{meta}{message}"
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"file": "a.png", "prompt": half}) + "\n")
    with pytest.raises(CLIError) as e:
        load_prompt_map(rows)
    assert str(e.value) == f"{rows}{message}"


def test_grid_refuses_a_prompt_argument_that_is_not_utf8(tmp_path, capsys):
    """A terminal sending Latin-1 ('caf\\xe9') gives Python a lone surrogate: grid loaded the first model, then died
    in its tokenizer with a TypeError traceback."""
    out = tmp_path / "g.png"
    prompt = b"caf\xe9".decode("utf-8", "surrogateescape")  # as Python decodes such an argument
    assert main(["grid", "--model", "shapes", "--prompt", prompt, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--prompt 'caf\\udce9' is not UTF-8 text (the shell passed bytes in another encoding)" in err
    assert not out.exists()


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            {"tag": "counting", "include": [{"class": "circle", "count": 20}]},
            "include[0].count is 20: GenEval keeps at most 16 detections per class, so the image could never pass; "
            "give 16 or less",
        ),
        (
            {
                "tag": "single_object",
                "include": [{"class": "circle"}],
                "exclude": [{"class": "circle", "count": 17}],
            },
            "exclude[0].count is 17: GenEval keeps at most 16 detections per class, so the exclusion could never "
            "apply; give 16 or less",
        ),
    ],
)
def test_a_count_past_the_judges_cap_is_refused(tmp_path, edit, message):
    """The judge keeps at most 16 detections per class: a count of 20 failed every image of its prompt, an exclude
    count of 17 excluded nothing, without a word. 16 is still taken."""
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({**COLORS_LINE, **edit}) + "\n")
    with pytest.raises(PromptFileError) as e:
        load_geneval_metadata(path)
    assert str(e.value) == f"{path}:1: {message}"
    path.write_text(
        json.dumps({**COLORS_LINE, "tag": "counting", "include": [{"class": "circle", "count": 16}]})
    )
    assert load_geneval_metadata(path)[0]["include"][0]["count"] == 16


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_utf16_with_a_bom_is_named_utf16(tmp_path, encoding):
    """A UTF-16 file with its byte-order mark (Notepad's "Unicode") was "not UTF-8 text (... can't decode byte 0xff
    in position 0 ...)": it says it is UTF-16."""
    from imgalign.prompts.io import PromptFileError, load_prompts

    path = tmp_path / "p.txt"
    text = "a red circle\n"
    path.write_bytes(("\ufeff" + text).encode(encoding) if encoding == "utf-16-be" else text.encode(encoding))
    with pytest.raises(PromptFileError, match=r"it is UTF-16 text, not UTF-8 .*; save it as UTF-8"):
        load_prompts(path)

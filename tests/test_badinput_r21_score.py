"""Bad-input round 21: `imgalign score --prompts` whose rows name some of the images only, and an --out that is
another file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from imgalign import shapes as W
from imgalign.cli import main
from imgalign.eval.suite import write_prompt_folder

SPECS = [W.single_object("circle"), W.colors("red", "square")]


def _scored(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_a_prompt_row_of_another_image_with_the_same_name_is_not_taken(tmp_path: Path) -> None:
    """--prompts with rows for gen/00000/samples/0000.png only: gen/00001/samples/0000.png (same file name) matched
    that row "by name" over its own folder's metadata.jsonl, and was scored against prompt 0's text (strict
    geneval 0 instead of 1), exit 0. Now a row whose file is another existing image is not taken by name: the image
    keeps its folder's metadata, or, outside the GenEval layout, gets an error row that says so."""
    gen = tmp_path / "gen"
    for i, spec in enumerate(SPECS):
        write_prompt_folder(gen, i, spec.to_metadata(), [W.render(spec, 0)[0]])
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"file": "gen/00000/samples/0000.png", **SPECS[0].to_metadata()}) + "\n")
    out = tmp_path / "s.jsonl"
    argv = ["score", str(gen), "--prompts", str(prompts), "--reward", "geneval:mode=strict", "--no-progress"]
    assert main([*argv, "--out", str(out)]) == 0
    rows = _scored(out)
    assert [r["prompt"] for r in rows] == [SPECS[0].prompt(), SPECS[1].prompt()]
    assert [r["scores"] for r in rows] == [{"geneval:mode=strict": 1.0}] * 2
    # outside the layout: b/x.png has no row of its own; the hint said "differs in letter case"
    for d, spec in zip("ab", SPECS):
        (tmp_path / d).mkdir()
        W.render(spec, 0)[0].save(tmp_path / d / "x.png")
    prompts.write_text(json.dumps({"file": "a/x.png", **SPECS[0].to_metadata()}) + "\n")
    argv = ["score", str(tmp_path / "a"), str(tmp_path / "b"), "--prompts", str(prompts), "--no-progress"]
    assert main([*argv, "--reward", "geneval:mode=strict", "--out", str(out)]) == 1
    rows = _scored(out)
    assert rows[0]["scores"] == {"geneval:mode=strict": 1.0} and rows[1]["scores"] == {}
    assert rows[1]["error"] == (
        f"no prompt for {tmp_path / 'b' / 'x.png'}: --prompts' row 'a/x.png' is another image of this name; add a "
        "row for this one (or use the GenEval folder layout)"
    )
    # a row whose file is no longer there (the images were moved) still matches by name
    shutil.move(tmp_path / "a", tmp_path / "moved")
    argv = ["score", str(tmp_path / "moved"), "--prompts", str(prompts), "--no-progress"]
    assert main([*argv, "--reward", "geneval:mode=strict", "--out", str(out)]) == 0
    assert _scored(out)[0]["prompt"] == SPECS[0].prompt()


def test_rows_of_the_base_models_images_still_give_the_prompts_of_another_folders_by_name(
    tmp_path: Path,
) -> None:
    """The rows written for base/x.png are the prompts of trained/x.png (the same prompts and seeds, another
    model): scoring trained/ with them matched by name, until a row naming another existing image was never taken
    ("'base/x.png' is another image of this name; add a row for this one", exit 1). Only a row of another image
    scored in the same run, or, in the GenEval layout, of another existing image, is left out by name."""
    for d in ("base", "trained"):
        (tmp_path / d).mkdir()
        W.render(SPECS[0], 0)[0].save(tmp_path / d / "x.png")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        json.dumps({"file": str(tmp_path / "base" / "x.png"), **SPECS[0].to_metadata()}) + "\n"
    )
    out = tmp_path / "s.jsonl"
    argv = ["score", str(tmp_path / "trained"), "--prompts", str(prompts), "--reward", "geneval:mode=strict"]
    assert main([*argv, "--no-progress", "--out", str(out)]) == 0
    assert [(r["prompt"], r["error"]) for r in _scored(out)] == [(SPECS[0].prompt(), None)]
    # a GenEval folder's image scored alone keeps its own metadata over the row of another prompt's image
    gen = tmp_path / "gen"
    for i, spec in enumerate(SPECS):
        write_prompt_folder(gen, i, spec.to_metadata(), [W.render(spec, 0)[0]])
    prompts.write_text(
        json.dumps({"file": str(gen / "00000/samples/0000.png"), **SPECS[0].to_metadata()}) + "\n"
    )
    argv = ["score", str(gen / "00001"), "--prompts", str(prompts), "--reward", "geneval:mode=strict"]
    assert main([*argv, "--no-progress", "--out", str(out)]) == 0
    assert [r["prompt"] for r in _scored(out)] == [SPECS[1].prompt()]


def test_an_out_that_is_not_a_score_output_is_not_replaced(tmp_path: Path, capsys) -> None:
    """`--out prompts.jsonl` (typed for --prompts) or `--out gen/00000/metadata.jsonl` replaced that file with the
    scores, exit 0: a prompt set or a folder's GenEval metadata was lost. An existing --out is now replaced only
    when it is empty or an earlier score output (JSONL or CSV); anything else is refused naming it, unchanged."""
    gen = tmp_path / "gen"
    write_prompt_folder(gen, 0, SPECS[0].to_metadata(), [W.render(SPECS[0], 0)[0]])
    meta = gen / "00000" / "metadata.jsonl"
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(meta.read_text())
    argv = ["score", str(gen), "--reward", "geneval:mode=strict", "--no-progress", "--out"]
    for other in (prompts, meta):
        before = other.read_text()
        assert main([*argv, str(other)]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert f"--out {str(other)!r} exists and is not an `imgalign score` output" in err
        assert "give a new file name, or delete that file first" in err
        assert other.read_text() == before
    # an earlier output (or an empty file) is replaced, as before: the same command runs again
    for name in ("s.jsonl", "s.csv", "empty.jsonl", "blank.jsonl"):
        out = tmp_path / name
        out.write_text("\n \n" if name.startswith("blank") else "")
        assert main([*argv, str(out)]) == 0 and main([*argv, str(out)]) == 0
        assert "geneval:mode=strict" in out.read_text()
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    assert main([*argv, str(tmp_path / "other.csv")]) == 2
    # a CSV of file/prompt rows with columns of its own starts as score's header does: it is not replaced either
    own = tmp_path / "list.csv"
    own.write_text("file,prompt,category\na.png,a photo of a circle,single_object\n")
    assert main([*argv, str(own)]) == 2
    assert own.read_text() == "file,prompt,category\na.png,a photo of a circle,single_object\n"


def test_a_row_relative_to_another_folder_is_named_with_the_path_to_write(tmp_path: Path) -> None:
    """Rows written relative to the images' folder (`00000/samples/0000.png`) while the prompt file lies above it
    match no image: the error row said "--prompts has '00000/samples/0000.png', which differs in letter case". Now
    it says the row ends like the image's path and gives the name to write, which then matches."""
    gen = tmp_path / "gen"
    for i, spec in enumerate(SPECS):
        write_prompt_folder(gen, i, spec.to_metadata(), [W.render(spec, 0)[0]])
        (gen / f"{i:05d}" / "metadata.jsonl").unlink()  # images from elsewhere: no folder metadata
    prompts = tmp_path / "p.jsonl"
    rows = [{"file": f"{i:05d}/samples/0000.png", **s.to_metadata()} for i, s in enumerate(SPECS)]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "s.jsonl"
    argv = ["score", str(gen), "--prompts", str(prompts), "--reward", "geneval:mode=strict", "--no-progress"]
    assert main([*argv, "--out", str(out)]) == 1
    scored = _scored(out)
    assert scored[0]["error"] == (
        f"no prompt for {gen / '00000' / 'samples' / '0000.png'}: --prompts' row '00000/samples/0000.png' ends like "
        f"its path, but a row names its file as given here or relative to the prompt file's folder ({str(tmp_path)!r}): "
        "write 'gen/00000/samples/0000.png' (or use the GenEval folder layout)"
    )
    prompts.write_text("".join(json.dumps({**r, "file": "gen/" + r["file"]}) + "\n" for r in rows))
    assert main([*argv, "--out", str(out)]) == 0
    assert [r["prompt"] for r in _scored(out)] == [s.prompt() for s in SPECS]


def test_prompts_as_a_json_array_says_to_write_one_object_per_line(tmp_path: Path) -> None:
    """A --prompts file holding one JSON array of rows (a .json export) was refused with "each row needs string
    fields 'file' and 'prompt'", though every element has both; it now says it is an array and how to write JSONL."""
    from imgalign.cli import CLIError
    from imgalign.commands.score import load_prompt_map

    p = tmp_path / "p.json"
    p.write_text(json.dumps([{"file": "a.png", "prompt": "a photo of a red circle"}]))
    with pytest.raises(CLIError) as e:
        load_prompt_map(p)
    assert str(e.value).startswith(f"{p}:1: a JSON array, and --prompts takes JSONL, one object per line")
    assert str(e.value).endswith("write it so, e.g. with jq -c '.[]' FILE")
    # indented (json.dump with indent=2): its first line "[" was "not valid JSON (Expecting value)"
    p.write_text(json.dumps([{"file": "a.png", "prompt": "a photo of a red circle"}], indent=2))
    with pytest.raises(CLIError) as e:
        load_prompt_map(p)
    assert str(e.value).startswith(f"{p}: a JSON array over several lines, and --prompts takes JSONL")
    assert str(e.value).endswith("write it so, e.g. with jq -c '.[]' FILE")
    p.write_text('[\n{"file": "a.png",\n')  # a cut-off array is still named by its line
    with pytest.raises(CLIError, match=r":1: not valid JSON \(Expecting value\); --prompts takes JSONL"):
        load_prompt_map(p)

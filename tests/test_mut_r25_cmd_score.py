"""Mutation round 25 (commands/score.py): behaviour the earlier tests let a mutant change unseen."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgalign import shapes as W
from imgalign.cli import main

SPEC = W.single_object("circle")


def _image(folder: Path, name: str = "a.png") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    W.render(SPEC, 0)[0].save(folder / name)
    return folder / name


@pytest.mark.parametrize("line", ['"a.png"', "5", "null", "true"])
def test_a_prompts_row_that_is_not_an_object_is_refused_by_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str
) -> None:
    """A --prompts line holding a JSON string, number, null or bool is no row: one error line naming the file and
    line (exit 2), not an AttributeError traceback from reading its fields."""
    img = _image(tmp_path / "imgs")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"file": str(img), "prompt": SPEC.prompt()}) + "\n" + line + "\n")
    argv = ["score", str(img), "--prompts", str(prompts), "--reward", "geneval", "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "s.jsonl")]) == 2
    err = capsys.readouterr().err
    assert f"{prompts}:2: each row needs string fields 'file' and 'prompt'" in err
    assert not (tmp_path / "s.jsonl").exists()


def test_a_prompts_row_naming_the_image_as_given_on_the_command_line_is_its_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row whose 'file' is the path as typed (relative to the working folder, not to the prompt file's folder)
    is that image's row, even where its name alone is ambiguous (another row of the same name, of an image that is
    not there)."""
    monkeypatch.chdir(tmp_path)
    _image(tmp_path / "a", "x.png")
    (tmp_path / "p").mkdir()
    prompts = tmp_path / "p" / "prompts.jsonl"
    other = W.colors("blue", "square")
    rows = [{"file": "a/x.png", **SPEC.to_metadata()}, {"file": "c/x.png", **other.to_metadata()}]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["score", "a/x.png", "--prompts", str(prompts), "--reward", "geneval", "--no-progress"]
    assert main([*argv, "--out", "s.jsonl"]) == 0
    (row,) = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert row["file"] == "a/x.png" and row["prompt"] == SPEC.prompt() and row["scores"] == {"geneval": 1.0}


def test_a_baseline_line_of_spaces_is_skipped_as_blank(tmp_path: Path) -> None:
    """A --baseline edited by hand may hold lines of spaces (or a tab) between rows: they are blank, not rows that
    are "not an `imgalign score` JSONL row"."""
    from imgalign.commands.score import load_baseline

    rows = [
        {"file": f"{i}.png", "prompt": "p", "scores": {"geneval": float(i)}, "error": None} for i in range(2)
    ]
    path = tmp_path / "b.jsonl"
    path.write_text(json.dumps(rows[0]) + "\n   \n\t\n" + json.dumps(rows[1]) + "\n  ")
    got = load_baseline(path)
    assert sorted(got) == ["0.png", "1.png"] and got["1.png"]["scores"] == {"geneval": 1.0}


def test_a_baseline_column_that_no_longer_parses_as_a_reward_stays_as_written(tmp_path: Path) -> None:
    """A column whose name today's reward specs refuse (``geneval:mode``, no value) is kept under that name; the
    baseline is still read (it pairs with no reward of this run, and the paired table says so)."""
    from imgalign.commands.score import load_baseline

    row = {"file": "0.png", "prompt": "p", "scores": {"geneval": 1.0, "geneval:mode": 0.5}, "error": None}
    path = tmp_path / "b.jsonl"
    path.write_text(json.dumps(row) + "\n")
    assert load_baseline(path)["0.png"]["scores"] == {"geneval": 1.0, "geneval:mode": 0.5}


def test_an_image_without_a_baseline_row_does_not_end_the_pairing() -> None:
    """Images are paired one by one: an image the baseline lacks (listed first) is passed over, and the images
    after it still pair."""
    from imgalign.commands.score import paired_changes

    rows = [
        {"file": f"{name}.png", "prompt": "p", "scores": {"geneval": s}, "error": None}
        for name, s in (("new", 0.0), ("a", 1.0), ("b", 0.5))
    ]
    baseline = {
        "a.png": {"file": "a.png", "prompt": "p", "scores": {"geneval": 0.5}},
        "b.png": {"file": "b.png", "prompt": "p", "scores": {"geneval": 0.5}},
    }
    (t,) = paired_changes(rows, baseline, ["geneval"])
    assert t["n"] == 2 and t["baseline"] == 0.5 and t["current"] == 0.75 and t["change"] == 0.25


def test_a_csv_out_whose_second_column_is_not_prompt_is_not_replaced(tmp_path: Path) -> None:
    """An existing --out CSV is ours only with write_rows' whole header shape (file, prompt, ..., error): a
    file,caption,...,error table is someone else's and is not replaced by the scores."""
    from imgalign.cli import CLIError
    from imgalign.commands.score import check_replaceable

    out = tmp_path / "labels.csv"
    out.write_text("file,caption,error\na.png,a red circle,\n")
    with pytest.raises(CLIError, match="exists and is not an `imgalign score` output"):
        check_replaceable(out)
    out.write_text("file,prompt,geneval,error\na.png,a red circle,1.0,\n")
    check_replaceable(out)


def test_the_partial_file_is_hidden_beside_out() -> None:
    """What an interrupted run keeps is ``.<out name>.partial.jsonl`` beside --out (the module docstring's name,
    the one the interrupt line prints), hidden from a listing of the output folder."""
    from imgalign.commands.score import partial_path

    assert partial_path(Path("runs") / "s.csv") == Path("runs") / ".s.csv.partial.jsonl"


def test_a_partial_file_with_bytes_that_are_not_utf8_keeps_its_whole_lines(tmp_path: Path) -> None:
    """A partial file damaged with bytes that are not UTF-8 (a crash of the disk, a hand edit) is read with those
    bytes replaced: its other lines are reused, not a UnicodeDecodeError traceback."""
    from imgalign.commands.score import read_partial

    entry = {"row": {"file": "a.png", "prompt": "p", "scores": {"geneval": 1.0}, "error": None}, "meta": None}
    path = tmp_path / ".s.jsonl.partial.jsonl"
    path.write_bytes(
        (json.dumps({"rewards": ["geneval"]}) + "\n" + json.dumps(entry) + "\n").encode()
        + b'{"row": \xff\xfe\n'
    )
    assert read_partial(path, ["geneval"]) == {"a.png": entry}


def test_an_out_that_is_the_baseline_by_another_path_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--out s.jsonl with --baseline /abs/s.jsonl (or a link to it) names the same file: the new scores would
    replace the baseline they are compared with, so it is refused (exit 2) and the baseline is kept."""
    monkeypatch.chdir(tmp_path)
    img = _image(tmp_path / "imgs")
    base = tmp_path / "s.jsonl"
    row = {"file": str(img), "prompt": SPEC.prompt(), "scores": {"geneval": 0.0}, "error": None}
    text = json.dumps(row) + "\n"
    base.write_text(text)
    (tmp_path / "link.jsonl").symlink_to(base)
    argv = ["score", str(img), "--reward", "geneval", "--baseline", str(base), "--no-progress"]
    for out in ("s.jsonl", "link.jsonl"):
        assert main([*argv, "--out", out]) == 2
        assert f"--out {out!r} is the --baseline file" in capsys.readouterr().err
    assert base.read_text() == text


def test_images_some_without_a_prompt_are_scored_with_an_error_row_for_the_rest(tmp_path: Path) -> None:
    """Without --prompts, a GenEval folder scored together with a loose image: the folder's images are scored, the
    loose image gets its "no prompt" error row and the exit status is 1. Only when no image has a prompt is the
    run refused up front."""
    from imgalign.eval.suite import write_prompt_folder

    gen = tmp_path / "gen"
    write_prompt_folder(gen, 0, SPEC.to_metadata(), [W.render(SPEC, 0)[0]])
    loose = _image(tmp_path / "loose")
    out = tmp_path / "s.jsonl"
    argv = ["score", str(gen), str(loose), "--reward", "geneval", "--no-progress", "--out", str(out)]
    assert main(argv) == 1
    rows = {Path(r["file"]).name: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["0000.png"]["scores"] == {"geneval": 1.0}
    assert rows["a.png"]["scores"] == {} and rows["a.png"]["error"].startswith(f"no prompt for {loose}:")


def test_score_says_where_it_wrote_and_which_baseline_it_paired_with(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After the summary table: "wrote OUT", then the paired table headed by the --baseline file it read."""
    img = _image(tmp_path / "imgs")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"file": str(img), **SPEC.to_metadata()}) + "\n")
    base = tmp_path / "base.jsonl"
    row = {"file": str(img), "prompt": SPEC.prompt(), "scores": {"geneval": 0.0}, "error": None}
    base.write_text(json.dumps(row) + "\n")
    out = tmp_path / "s.jsonl"
    argv = ["score", str(img), "--prompts", str(prompts), "--reward", "geneval", "--no-progress"]
    assert main([*argv, "--baseline", str(base), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"\nwrote {out}\npaired with {base} (change = this - baseline" in text

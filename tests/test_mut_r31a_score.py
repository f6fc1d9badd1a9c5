"""Round 31a mutation survivors in imgalign/commands/score.py: which --prompts rows are warned of as naming an
image that is not there, and a row that names the scored image through a path relative to the prompt file's
folder with '..', and the rewards the no-prompt refusal names."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from imgalign import shapes as W
from imgalign.cli import main

SPEC = W.single_object("circle")


def test_a_row_an_image_took_by_name_is_not_warned_of_as_naming_an_image_not_there(
    tmp_path: Path, caplog
) -> None:
    """Rows written for another folder (the base model's renders/, since deleted) give the trained model's images
    their prompts by file name; such a row was taken, so it is no row of a missing image."""
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    W.render(SPEC, 0)[0].save(imgs / "a.png")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"file": "renders/a.png", **SPEC.to_metadata()}) + "\n")
    out = tmp_path / "s.jsonl"
    argv = ["score", str(imgs), "--prompts", str(prompts), "--reward", "geneval:mode=strict", "--no-progress"]
    with caplog.at_level(logging.WARNING, logger="imgalign.commands.score"):
        assert main([*argv, "--out", str(out)]) == 0
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert json.loads(out.read_text())["prompt"] == SPEC.to_metadata()["prompt"]


def test_a_row_naming_the_image_relative_to_the_prompt_folder_through_dotdot_gives_its_prompt(
    tmp_path: Path, monkeypatch
) -> None:
    """A row ``../imgs/a.png`` in p/p.jsonl names the very image scored (not another image of the run), so the
    image takes it; without the same-file check it was refused as another scored image's row: "no prompt"."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "imgs").mkdir()
    (tmp_path / "p").mkdir()
    W.render(SPEC, 0)[0].save(tmp_path / "imgs" / "a.png")
    prompts = tmp_path / "p" / "p.jsonl"
    prompts.write_text(json.dumps({"file": "../imgs/a.png", **SPEC.to_metadata()}) + "\n")
    out = tmp_path / "s.jsonl"
    argv = [
        "score",
        str(tmp_path / "imgs" / "a.png"),
        "--prompts",
        str(prompts),
        "--reward",
        "geneval:mode=strict",
    ]
    assert main([*argv, "--no-progress", "--out", str(out)]) == 0
    row = json.loads(out.read_text())
    assert row["prompt"] == SPEC.to_metadata()["prompt"] and row["error"] is None


def test_the_no_prompt_refusal_names_only_the_rewards_that_read_a_prompt(tmp_path: Path, capsys) -> None:
    """artifact reads no prompt: beside geneval, the refusal says geneval scores against a prompt, not artifact."""
    W.render(SPEC, 0)[0].save(tmp_path / "a.png")
    argv = ["score", str(tmp_path / "a.png"), "--reward", "artifact", "--reward", "geneval", "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "s.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "geneval score(s) an image against its prompt, and none of the 1 image(s) has one" in err
    assert "artifact" not in err and not (tmp_path / "s.jsonl").exists()

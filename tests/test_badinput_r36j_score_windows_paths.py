"""`imgalign score --prompts` written on Windows (round 36j): rows naming 'imgs\\a.png'."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from imgalign import shapes as W
from imgalign.cli import main


def test_windows_paths_in_prompt_rows_are_named_with_the_fix(tmp_path: Path, caplog) -> None:
    """Rows with 'imgs\\\\a.png' (a prompt file written on Windows) match no image here, where '\\\\' is part of a
    file name: every image was an error row "no prompt for ...", and the warning said to "correct the rows' 'file'"
    without saying what was wrong with them. It now says to write '/' between folders."""
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    spec = W.single_object("circle")
    W.render(spec, 0)[0].save(imgs / "a.png")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"file": "imgs\\a.png", **spec.to_metadata()}) + "\n")
    argv = ["score", str(imgs), "--prompts", str(prompts), "--reward", "geneval:mode=strict", "--no-progress"]
    with caplog.at_level(logging.WARNING, logger="imgalign.commands.score"):
        main([*argv, "--out", str(tmp_path / "s.jsonl")])
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    assert "1 of 1 --prompts rows name an image that is not there (e.g. 'imgs\\\\a.png'" in warned
    assert "1 of them (e.g. 'imgs\\\\a.png') name a file that is there with '/' in place of '\\'" in warned
    assert "write '/' between folders" in warned


def test_a_missing_image_is_not_called_a_windows_path(tmp_path: Path, caplog) -> None:
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    spec = W.single_object("circle")
    W.render(spec, 0)[0].save(imgs / "a.png")
    prompts = tmp_path / "p.jsonl"
    rows = [{"file": "imgs/a.png", **spec.to_metadata()}, {"file": "imgs\\b.png", **spec.to_metadata()}]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["score", str(imgs), "--prompts", str(prompts), "--reward", "geneval:mode=strict", "--no-progress"]
    with caplog.at_level(logging.WARNING, logger="imgalign.commands.score"):
        assert main([*argv, "--out", str(tmp_path / "s.jsonl")]) == 0
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    assert "1 of 2 --prompts rows name an image that is not there" in warned and "Windows" not in warned

"""Bad-input round 23: `imgalign score --prompts` whose rows name images that are not there."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from imgalign import shapes as W
from imgalign.cli import main

SPECS = [W.single_object("circle"), W.colors("red", "square"), W.single_object("cross")]


def test_prompt_rows_of_images_that_are_not_there_are_named(tmp_path: Path, caplog) -> None:
    """A generation cut short: --prompts lists three images, the folder holds two. The summary said "2 files, 2
    fully scored", exit 0, and nothing told that an image the rows expect was missing; a warning now names the
    count and a row. A row of an existing image that is not scored (a prompt file that covers more images than
    this run scores) is not warned of."""
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    for name, spec in zip(("a.png", "b.png"), SPECS):
        W.render(spec, 0)[0].save(imgs / name)
    (tmp_path / "other").mkdir()
    W.render(SPECS[2], 0)[0].save(tmp_path / "other" / "c.png")
    rows = [
        {"file": "imgs/a.png", **SPECS[0].to_metadata()},
        {"file": "imgs/b.png", **SPECS[1].to_metadata()},
        {"file": "other/c.png", **SPECS[2].to_metadata()},
    ]
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["score", str(imgs), "--prompts", str(prompts), "--reward", "geneval:mode=strict", "--no-progress"]
    with caplog.at_level(logging.WARNING, logger="imgalign.commands.score"):
        assert main([*argv, "--out", str(tmp_path / "s.jsonl")]) == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    prompts.write_text(
        prompts.read_text() + json.dumps({"file": "imgs/d.png", **SPECS[2].to_metadata()}) + "\n"
    )
    with caplog.at_level(logging.WARNING, logger="imgalign.commands.score"):
        assert main([*argv, "--out", str(tmp_path / "s2.jsonl")]) == 0
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    assert "1 of 4 --prompts rows name an image that is not there (e.g. 'imgs/d.png'" in warned
    assert str(tmp_path) in warned and "check that the images are all there" in warned
    assert len((tmp_path / "s2.jsonl").read_text().splitlines()) == 2  # the images there are scored as before


def test_one_image_spelt_two_ways_is_scored_once(tmp_path: Path, monkeypatch) -> None:
    """`score a/x.png /abs/a/x.png a/sub/../x.png` scored one image three times, each counted in the summary's
    mean; it is scored once (as first spelt). A symlink to it under another name is another image and stays."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a" / "sub").mkdir(parents=True)
    W.render(SPECS[0], 0)[0].save(tmp_path / "a" / "x.png")
    (tmp_path / "a" / "y.png").symlink_to(tmp_path / "a" / "x.png")
    out = tmp_path / "s.jsonl"
    paths = ["a/x.png", str(tmp_path / "a" / "x.png"), "a/sub/../x.png", "a"]
    assert main(["score", *paths, "--reward", "artifact", "--no-progress", "--out", str(out)]) == 0
    assert [json.loads(line)["file"] for line in out.read_text().splitlines()] == ["a/x.png", "a/y.png"]

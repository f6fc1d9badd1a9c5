"""Round 35 (helper j): each in-process ``imgalign.cli.main`` call says what a fresh process says. The warning
naming a folder's dangling image symlinks was given once per process: a notebook's second ``score`` of the same
folder read it as fewer images without a word."""

from __future__ import annotations

import logging

from PIL import Image

from imgalign.cli import main


def test_a_second_call_names_the_dangling_links_again(tmp_path, caplog) -> None:
    images = tmp_path / "images"
    images.mkdir()
    Image.new("RGB", (32, 32), (200, 40, 40)).save(images / "a.png")
    (images / "gone.png").symlink_to(tmp_path / "nowhere.png")
    said = []
    for i in range(2):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="imgalign"):
            out = tmp_path / f"scores{i}.jsonl"
            assert (
                main(["score", str(images), "--reward", "artifact", "--out", str(out), "--no-progress"]) == 0
            )
        said.append(
            any("symlink(s)" in r.getMessage() and "gone.png" in r.getMessage() for r in caplog.records)
        )
    assert said == [True, True]

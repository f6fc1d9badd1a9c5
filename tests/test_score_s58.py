"""Images and metadata `imgalign score` and `eval --images` read: a JSON key given twice, an image of several frames,
a folder of images too small to encode (stop 58; left alone by round 25 and carried from earlier stops)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from imgalign.cli import main


def _geneval_folder(root: Path, metadata_line: str) -> None:
    """A GenEval-layout folder of one prompt: root/00000/metadata.jsonl holding `metadata_line`, and one sample."""
    sample = root / "00000" / "samples"
    sample.mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(sample / "0000.png")
    (root / "00000" / "metadata.jsonl").write_text(metadata_line)


def test_score_refuses_a_prompt_row_naming_a_key_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """json.loads keeps the last of two equal keys: a --prompts row {"file": "a.png", ..., "file": "b.png"} scored
    b.png under a.png's prompt, without a word (prompt files for `train` already refused it). The line and the key
    are named; nothing is written."""
    monkeypatch.chdir(tmp_path)
    for name in ("a.png", "b.png"):
        Image.new("RGB", (8, 8)).save(tmp_path / name)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        '{"file": "a.png", "prompt": "a cat"}\n{"file": "a.png", "prompt": "a dog", "file": "b.png"}\n'
    )
    argv = ["score", "a.png", "b.png", "--prompts", str(rows), "--reward", "artifact", "--out", "s.jsonl"]
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (
        f"{rows}:2: key 'file' appears twice in one object ('a.png' and 'b.png'); keep the one you mean"
        in err
    )
    assert not (tmp_path / "s.jsonl").exists()


def test_score_refuses_geneval_metadata_naming_a_key_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A GenEval folder's metadata.jsonl with "prompt" twice paired its images with the second, without a word."""
    monkeypatch.chdir(tmp_path)
    head = json.dumps({"tag": "single_object", "include": [{"class": "cat", "count": 1}]})[:-1]
    _geneval_folder(
        tmp_path / "gen", head + ', "prompt": "a photo of a cat", "prompt": "a photo of a dog"}\n'
    )
    assert main(["score", "gen", "--reward", "artifact", "--out", "g.jsonl"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "gen/00000/metadata.jsonl:1: key 'prompt' appears twice in one object" in err
    assert not (tmp_path / "g.jsonl").exists()


def test_eval_images_refuses_geneval_metadata_naming_a_key_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`eval --images` judged a prompt folder whose metadata.jsonl gives "include" twice by the last one."""
    monkeypatch.chdir(tmp_path)
    include = json.dumps([{"class": "circle", "count": 1}])
    line = (
        f'{{"tag": "single_object", "include": {include}, "prompt": "a photo of a circle", "include": []}}\n'
    )
    _geneval_folder(tmp_path / "gen", line)
    assert main(["eval", "--suite", "shapes", "--images", "gen", "--out", "ev", "--no-progress"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "gen/00000/metadata.jsonl: line 1: key 'include' appears twice in one object" in err
    assert not (tmp_path / "ev" / "results.jsonl").exists()


def test_an_image_of_several_frames_is_read_by_its_first_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An animated GIF (or a multi-page TIFF) was scored by its first frame without a word; read_image now names
    the file and its frame count. A single-frame image gives no word."""
    from imgalign.rewards.io import read_image

    frames = [Image.new("RGB", (8, 8), c) for c in ("red", "blue", "green")]
    frames[0].save(tmp_path / "a.gif", save_all=True, append_images=frames[1:])
    frames[0].save(tmp_path / "b.tif", save_all=True, append_images=frames[1:2])
    frames[0].save(tmp_path / "c.gif")
    with caplog.at_level("WARNING", logger="imgalign.rewards.io"):
        first = read_image(tmp_path / "a.gif")
        read_image(tmp_path / "b.tif")
        read_image(tmp_path / "c.gif")
    assert first.getpixel((0, 0))[0] > 200  # the first frame (red)
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / 'a.gif'} holds 3 frames; only the first is read (save the frame you mean as its own image)",
        f"{tmp_path / 'b.tif'} holds 2 frames; only the first is read (save the frame you mean as its own image)",
    ]


def test_encoding_a_folder_of_too_small_images_names_the_folder(tmp_path: Path) -> None:
    """The stats features refuse images under 3x3 with the size only: the encoder sees pixels, not files, so
    `rewards fid-stats --images DIR` (or a fit) named no folder. encode_image_folder adds it."""
    from imgalign.rewards.features import image_stats
    from imgalign.rewards.io import encode_image_folder

    folder = tmp_path / "thumbs"
    folder.mkdir()
    for n in range(2):
        Image.new("RGB", (2, 2)).save(folder / f"{n}.png")
    with pytest.raises(ValueError) as e:
        encode_image_folder(folder, image_stats)
    assert (
        str(e.value)
        == f"stats features need images of at least 3x3 pixels, not 2x2 (the images under {str(folder)!r})"
    )

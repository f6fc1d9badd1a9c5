"""GenEval-layout folders are read in number order, also past the names' padding (own fixes, stop 57)."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from imgalign.eval.suite import read_folder, write_prompt_folder, write_sample

META = {"tag": "single_object", "include": [{"class": "circle", "count": 1}], "prompt": "a photo of a circle"}


def test_prompt_folders_and_samples_past_the_padding_are_read_in_number_order(tmp_path: Path) -> None:
    image = Image.new("RGB", (8, 8))
    for index in (100000, 99999, 2):
        write_prompt_folder(tmp_path, index, META, [])
    for j in (10000, 1001, 0):
        write_sample(tmp_path, 99999, j, image)
    folders = list(read_folder(tmp_path))
    # by name, 100000 sorted before 99999 and 10000.png before 1001.png
    assert [f.index for f in folders] == [2, 99999, 100000]
    assert [p.name for p in folders[1].samples] == ["0000.png", "1001.png", "10000.png"]


def test_a_folder_or_sample_named_by_a_superscript_digit_is_no_numbered_one(tmp_path: Path) -> None:
    """'²'.isdigit() is true but int('²') fails: such a folder or sample stopped the read with 'invalid literal for
    int()'; like any other name, it is not a numbered prompt folder or sample."""
    image = Image.new("RGB", (8, 8))
    write_prompt_folder(tmp_path, 3, META, [])
    write_sample(tmp_path, 3, 0, image)
    (tmp_path / "²").mkdir()
    image.save(tmp_path / "00003" / "samples" / "².png")
    folders = list(read_folder(tmp_path))
    assert [f.index for f in folders] == [3]
    assert [p.name for p in folders[0].samples] == ["0000.png"]

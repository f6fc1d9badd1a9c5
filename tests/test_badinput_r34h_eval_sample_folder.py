"""Bad-input round 34h: a folder named like an image in a GenEval layout's samples folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign import shapes as W
from imgalign.cli import main
from imgalign.eval.suite import write_prompt_folder

SPEC = W.single_object("circle")


def test_eval_names_a_sample_that_is_a_folder_and_says_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`eval --images` of a layout whose samples/0000.png is a folder stopped with shutil's bare "[Errno 21] Is a
    directory: '.../0000.png'"; a rerun once it is fixed judges the folder."""
    gen = tmp_path / "gen"
    write_prompt_folder(gen, 0, SPEC.to_metadata(), [W.render(SPEC, 0)[0]])
    write_prompt_folder(gen, 1, SPEC.to_metadata(), [])
    odd = gen / "00001" / "samples" / "0000.png"
    odd.mkdir()
    argv = ["eval", "--images", str(gen), "--no-progress", "--out", str(tmp_path / "ev")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{odd} is a folder, where the GenEval layout holds an image" in err
    assert "move it out of the samples folder" in err
    odd.rmdir()
    W.render(SPEC, 1)[0].save(odd)
    assert main(argv) == 0

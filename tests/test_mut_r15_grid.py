"""``imgalign grid`` (imgalign/commands/grid.py): its defaults, the rows read from prompts and the seeds, reward
and output checks made before any model loads (mutation round 15)."""

from __future__ import annotations

import argparse
import logging

import pytest

from imgalign.cli import build_parser, main
from imgalign.commands.grid import check_reward_spec, parse_seeds, read_rows


def grid_args(*extra: str) -> argparse.Namespace:
    return build_parser().parse_args(["grid", "--model", "a=shapes", *extra, "--out", "g.png"])


def test_the_grid_shows_sixteen_prompts_of_a_file_at_160_pixels_by_default(tmp_path, caplog):
    """--max-prompts defaults to 16 and --cell to 160; a file of exactly 16 prompts is shown whole without a word,
    one of 17 is cut to its first 16 with a warning."""
    path = tmp_path / "p.txt"
    path.write_text("".join(f"prompt {i}\n" for i in range(16)))
    args = grid_args("--prompts", str(path))
    assert args.cell == 160  # --max-prompts: 16 when not given (its rows below)
    with caplog.at_level(logging.WARNING):
        prompts, metas = read_rows(args)
    assert prompts == [f"prompt {i}" for i in range(16)] and metas == [None] * 16
    assert "--max-prompts" not in caplog.text
    path.write_text("".join(f"prompt {i}\n" for i in range(17)))
    with caplog.at_level(logging.WARNING):
        prompts, _ = read_rows(args)
    assert prompts == [f"prompt {i}" for i in range(16)]
    assert "p.txt holds 17 prompts; the grid shows its first 16 (--max-prompts 16)" in caplog.text
    with pytest.raises(ValueError, match=r"--max-prompts must be at least 1 \(got 0\)"):
        read_rows(grid_args("--prompts", str(path), "--max-prompts", "0"))


def test_typed_prompts_are_stripped_and_a_blank_one_is_refused():
    """--prompt ' a red circle ' is the row 'a red circle' (no metadata); a blank --prompt among others is refused."""
    assert read_rows(grid_args("--prompt", " a red circle ", "--prompt", "b")) == (
        ["a red circle", "b"],
        [None, None],
    )
    with pytest.raises(ValueError, match="--prompt needs non-empty text"):
        read_rows(grid_args("--prompt", "a", "--prompt", "  "))


def test_seeds_take_a_trailing_comma_and_name_the_first_bad_seed():
    assert parse_seeds("0,1,") == [0, 1] and parse_seeds(" 3 , 2") == [3, 2]
    with pytest.raises(ValueError, match=r"^--seeds -1: seeds are integers from 0 to 2\*\*63 - 1$"):
        parse_seeds("5,-1,-2")


def test_a_module_attr_reward_path_passes_the_name_check():
    """A reward given as a module:attr path is not refused as an unknown reward name (it is imported when built)."""
    check_reward_spec("my.rewards:brightness")
    with pytest.raises(ValueError, match="unknown reward 'brightness'"):
        check_reward_spec("brightness")


def test_an_upper_case_png_name_and_the_longest_t5_context_are_taken(tmp_path, monkeypatch, capsys):
    """--out G.PNG is a PNG name, and --max-sequence-length 512 is the longest SD3 and FLUX take (513 is refused):
    both pass the checks, so the first model starts loading."""
    import imgalign.pipelines as P

    def load_pipeline(spec, device="cpu", dtype=None):
        raise ValueError("loading stopped here")

    monkeypatch.setattr(P, "load_pipeline", load_pipeline)
    argv = ["grid", "--model", "a=shapes", "--prompt", "x", "--max-sequence-length"]
    assert main([*argv, "512", "--out", str(tmp_path / "G.PNG")]) == 2
    assert "loading stopped here" in capsys.readouterr().err
    assert main([*argv, "513", "--out", str(tmp_path / "g.png")]) == 2
    assert "--max-sequence-length 513: the SD3 and FLUX pipelines take at most 512" in capsys.readouterr().err
